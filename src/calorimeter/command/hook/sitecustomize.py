"""Loaded at start-up by every Python process of a ``command`` cell's rank 0 (this folder is first on its
PYTHONPATH): at exit, the process writes what it ran into ``$CALORIMETER_IMPORTS_DIR/imports-<pid>.json``: its
interpreter, its main file, the distributions (name and version) of the packages it imported, and the files of the
modules it imported from outside any distribution and the standard library (the trainer's own code). Only the
standard library is used, and nothing fails the command: a process that cannot report says nothing.
:mod:`calorimeter.command.provenance` reads the reports. Then the environment's own ``sitecustomize``, if there is
one, is loaded as it would have been.
"""

from __future__ import annotations

import atexit
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _report() -> None:
    out_dir = os.environ.get("CALORIMETER_IMPORTS_DIR")
    if not out_dir:
        return
    try:
        import importlib.metadata as metadata
        import json
        import sysconfig

        paths = sysconfig.get_paths()
        system = tuple(os.path.join(os.path.realpath(paths[k]), "") for k in ("stdlib", "platstdlib"))
        site = tuple(os.path.join(os.path.realpath(paths[k]), "") for k in ("purelib", "platlib"))
        owners = metadata.packages_distributions()
        dists: dict[str, str | None] = {}
        files = set()
        for name, module in list(sys.modules.items()):
            top = name.partition(".")[0]
            if top in sys.stdlib_module_names or top in ("sitecustomize", "calorimeter", "__main__"):
                continue
            for dist in owners.get(top, ()):
                if dist not in dists:
                    try:
                        dists[dist] = metadata.version(dist)
                    except metadata.PackageNotFoundError:
                        dists[dist] = None
            path = getattr(module, "__file__", None)
            if top in owners or not isinstance(path, str):
                continue
            real = os.path.realpath(path)
            if not real.startswith(system + site) and os.path.isfile(real):
                files.add(real)
        main = getattr(sys.modules.get("__main__"), "__file__", None)
        doc = {"pid": os.getpid(), "argv": sys.argv, "executable": sys.executable,
               "python": sys.version.split()[0], "main": os.path.realpath(main) if isinstance(main, str) else None,
               "distributions": dists, "files": sorted(files)}
        tmp = os.path.join(out_dir, f".imports-{os.getpid()}.json.tmp")
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, os.path.join(out_dir, f"imports-{os.getpid()}.json"))
    except Exception:  # noqa: BLE001, S110 - never fail the command
        pass


def _load_the_environments_own() -> None:
    """The ``sitecustomize`` this folder hides, if any, loaded in its place."""
    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


atexit.register(_report)
try:
    _load_the_environments_own()
except Exception as e:  # noqa: BLE001 - as Python reports a failing sitecustomize, and goes on
    print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}", file=sys.stderr)
