#!/usr/bin/env bash
# A real two-node SLURM on one host (Debian 12's slurm-wlm 22.05) for the tests: munge, MariaDB + slurmdbd (so that
# sacct works), slurmctld, and one configless slurmd per node (node1, node2), each with 4 fake GPUs. Each slurmd runs
# in its own UTS + mount namespace: its hostname is its node name and it sees a private /etc/hosts (node names ->
# 127.0.0.1 and ::1, torch looks up IPv6 first) and a private nsswitch.conf (`hosts: files`), so that jobs, which
# inherit both, resolve every node name locally and nothing ever asks DNS. Every daemon talks to loopback only.
# Run as root; no systemd needed. Every file lives under $T. See docs/slurm.md "Testing".
#
#   bash tests/slurm/up.sh      # idempotent: installs packages if missing (apt), starts what is not running
#   bash tests/slurm/down.sh    # cancels the test jobs, stops every daemon by the PID in its pid file
#
# Environment: CALORIMETER_SLURM_DIR (default /tmp/calorimeter-slurm), CALORIMETER_SLURM_NODES (default 2).
set -euo pipefail
T=${CALORIMETER_SLURM_DIR:-/tmp/calorimeter-slurm}
N=${CALORIMETER_SLURM_NODES:-2}
NODES=$(seq -f 'node%g' 1 "$N" | paste -sd' ')
export SLURM_CONF=$T/etc/slurm.conf
ts() { date +%s.%N; }; T0=$(ts); lap() { printf 'slurm-up: %-24s %6.2fs\n' "$1" "$(awk "BEGIN{print $(ts) - $T0}")"; }
# waitfor WHAT CMD...: poll CMD until it succeeds, for up to CALORIMETER_SLURM_WAIT_S seconds (default 240: on a loaded
# 2-core machine, slurmctld and two slurmd may need more than 30 s to register); on a timeout, print what the daemons
# said (node states, the ends of their logs) so that a failed CI run explains itself.
WAIT_S=${CALORIMETER_SLURM_WAIT_S:-240}
diagnose() { { echo "--- sinfo -N -l"; env -u SLURM_CONF timeout 20 sinfo -N -l 2>&1 || true
               echo "--- uptime: $(uptime)"
               for f in "$T"/log/slurmctld.log "$T"/log/slurmd-*.log "$T"/log/slurmdbd.log "$T"/log/waitfor.log; do
                 [ -e "$f" ] && { echo "--- tail $f"; tail -n 25 "$f"; }; done; } >&2; }
waitfor() { local what=$1 end=$(( $(date +%s) + WAIT_S )); shift
            until "$@" >>"$T/log/waitfor.log" 2>&1; do
              [ "$(date +%s)" -lt "$end" ] || { echo "slurm-up: TIMEOUT (${WAIT_S} s) waiting for $what (see $T/log)" >&2
                                                diagnose; exit 1; }
              sleep 0.2; done; }
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

[ "$(id -u)" = 0 ] || { echo "slurm-up: needs root" >&2; exit 2; }

# 0) packages (postinst scripts cannot start services without systemd: fine, we start them below)
need=()
for exe in slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge slurmdbd:slurmdbd mariadbd:mariadb-server; do
  command -v "${exe%%:*}" >/dev/null || need+=("${exe##*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || { echo "slurm-up: no apt-get to install ${need[*]}" >&2; exit 2; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurm-wlm slurmctld slurmd slurm-client munge slurmdbd \
    mariadb-server >/dev/null
  lap "apt install"
fi
mkdir -p "$T"/{etc,state,spool,log,run,fakegpu,munge,mysql}

# 1) munge: own key/pid/log under $T but the DEFAULT socket (sacct/sacctmgr ignore AuthInfo=socket=...)
MUNGE_SOCK_DIR=$(dirname "$(munged --help | sed -n 's/.*--socket=PATH.*\[\(.*\)\]/\1/p')")
install -d -o munge -g munge -m 755 "$MUNGE_SOCK_DIR"
chown munge:munge "$T/munge"; chmod 700 "$T/munge"
if ! alive "$T/munge/munged.pid"; then
  [ -s "$T/munge/munge.key" ] || runuser -u munge -- mungekey --create --keyfile="$T/munge/munge.key"
  runuser -u munge -- munged --force --key-file="$T/munge/munge.key" --pid-file="$T/munge/munged.pid" \
      --log-file="$T/munge/munged.log" --seed-file="$T/munge/munged.seed"
fi
munge -n | unmunge >/dev/null
lap "munged"

# 2) MariaDB with a private datadir and socket (only sacct needs it)
chown mysql:mysql "$T/mysql"
if ! alive "$T/mysql/mysqld.pid"; then
  [ -d "$T/mysql/mysql" ] || mariadb-install-db --user=mysql --datadir="$T/mysql" --skip-test-db \
      --auth-root-authentication-method=socket >"$T/log/mariadb-install.log"
  setsid nohup mariadbd --user=mysql --datadir="$T/mysql" --socket="$T/mysql/mysqld.sock" \
      --pid-file="$T/mysql/mysqld.pid" --bind-address=127.0.0.1 --port=3306 --innodb-buffer-pool-size=64M \
      --innodb-lock-wait-timeout=900 >"$T/log/mariadb.log" 2>&1 < /dev/null &
  waitfor mariadb mariadb-admin --socket="$T/mysql/mysqld.sock" ping
  waitfor "mariadb pid file" test -s "$T/mysql/mysqld.pid"
fi
mariadb --socket="$T/mysql/mysqld.sock" -uroot -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
lap "mariadbd"

# 3) fake GPUs: gres File= must be character devices -> clones of /dev/null (char 1:3); 4 per node
for i in $(seq 0 $(( 4 * N - 1 ))); do [ -c "$T/fakegpu/nvidia$i" ] || mknod "$T/fakegpu/nvidia$i" c 1 3; done

# 4) config. KillWait/MinJobAge are short so that cancelled and timed-out jobs end quickly in tests. Each node
# declares every core of the host (SLURM then sees N x the real cores, so that a 2x2 job fits) and 1/N of its memory.
CPUS=$(nproc); MEM=$(( ($(free -m | awk '/^Mem:/{print $2}') - 1024) / N ))
NODELIST=node[1-$N]
cat > "$T/etc/slurm.conf.new" <<CONF
ClusterName=calorimeter
SlurmctldHost=localhost
SlurmctldParameters=enable_configless
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# a requeued job may start again after cred_expire seconds (default 120): short for tests
AuthInfo=cred_expire=10
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_min_interval=500000
KillWait=5
MinJobAge=60
JobRequeue=1
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool/%n
SlurmctldPidFile=$T/run/slurmctld.pid
SlurmdPidFile=$T/run/slurmd-%n.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd-%n.log
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageTRES=gres/gpu
JobCompType=jobcomp/none
GresTypes=gpu
CONF
for k in $(seq 1 "$N"); do
  echo "NodeName=node$k NodeHostname=node$k NodeAddr=127.0.0.1 Port=$(( 6900 + k )) CPUs=$CPUS RealMemory=$MEM Gres=gpu:4 State=UNKNOWN" >> "$T/etc/slurm.conf.new"
done
echo "PartitionName=debug Nodes=$NODELIST Default=YES MaxTime=INFINITE State=UP" >> "$T/etc/slurm.conf.new"
: > "$T/etc/gres.conf.new"
for k in $(seq 1 "$N"); do
  echo "NodeName=node$k Name=gpu File=$T/fakegpu/nvidia[$(( 4 * k - 4 ))-$(( 4 * k - 1 ))]" >> "$T/etc/gres.conf.new"
done
# the nodes' view of names: every node name and localhost on loopback (v4 and v6), files only (never DNS)
{ echo "127.0.0.1 localhost $NODES"; echo "::1 localhost ip6-localhost ip6-loopback $NODES"; } > "$T/etc/hosts"
sed 's/^hosts:.*/hosts:          files/' /etc/nsswitch.conf > "$T/etc/nsswitch.conf"
grep -q '^hosts:' "$T/etc/nsswitch.conf" || echo "hosts:          files" >> "$T/etc/nsswitch.conf"
cat > "$T/etc/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
LogFile=$T/log/slurmdbd.log
PidFile=$T/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
CONF
chmod 600 "$T/etc/slurmdbd.conf"          # slurmdbd refuses a group/world-readable slurmdbd.conf

# A changed cluster (another node count, or the earlier one-node layout) restarts slurmctld and every slurmd.
stop_pid() { local pid; pid=$(cat "$1" 2>/dev/null) || return 0; kill -0 "$pid" 2>/dev/null || return 0; kill "$pid"
             for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.25; done; kill -9 "$pid"; }
if ! cmp -s "$T/etc/slurm.conf.new" "$T/etc/slurm.conf" || ! cmp -s "$T/etc/gres.conf.new" "$T/etc/gres.conf"; then
  for f in "$T"/run/slurmd.pid "$T"/run/slurmd-*.pid; do [ -e "$f" ] && stop_pid "$f"; done
  stop_pid "$T/run/slurmctld.pid"
  mv "$T/etc/slurm.conf.new" "$T/etc/slurm.conf"; mv "$T/etc/gres.conf.new" "$T/etc/gres.conf"
else
  rm -f "$T/etc/slurm.conf.new" "$T/etc/gres.conf.new"
fi

# 5) slurmdbd -> register the cluster -> slurmctld -> one slurmd per node (configless: each fetches its config
# from slurmctld), each in its own UTS + mount namespace (hostname = node name, private hosts + nsswitch).
alive "$T/run/slurmdbd.pid" || slurmdbd
waitfor slurmdbd sacctmgr -n show cluster
sacctmgr -n -P show cluster format=cluster | grep -qx calorimeter || sacctmgr -i add cluster calorimeter >>"$T/log/waitfor.log" || true
lap "slurmdbd + cluster"
# A fresh slurmctld starts with a clean state (-c): jobs left in $T/state by an interrupted earlier run (or a copied
# /tmp) would otherwise be recovered and hold the nodes, which then never show idle.
alive "$T/run/slurmctld.pid" || slurmctld -c
waitfor slurmctld scontrol ping
for node in $NODES; do
  mkdir -p "$T/spool/$node"
  alive "$T/run/slurmd-$node.pid" || env -u SLURM_CONF unshare --uts --mount --propagation private -- bash -c "
    set -e; hostname $node
    mount --bind '$T/etc/hosts' /etc/hosts; mount --bind '$T/etc/nsswitch.conf' /etc/nsswitch.conf
    exec slurmd -N $node --conf-server localhost:6817"
done
waitfor "nodes idle" bash -c "[ \"\$(env -u SLURM_CONF sinfo -h -N -t idle -o %N | sort -u | wc -l)\" = $N ]"
lap "slurmctld + ${N} slurmd idle"
env -u SLURM_CONF sinfo -N
