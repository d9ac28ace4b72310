#!/usr/bin/env bash
# A real one-node SLURM (Debian 12's slurm-wlm 22.05) for the tests: munge, MariaDB + slurmdbd (so that sacct works),
# slurmctld + slurmd in configless mode, 4 fake GPUs. Run as root; no systemd needed. Every file lives under $T.
# Recipe and pitfalls: ../shared/notes/stack.md section 3 beside the checkout (docs/slurm.md "Testing").
#
#   bash tests/slurm/up.sh      # idempotent: installs packages if missing (apt), starts what is not running
#   bash tests/slurm/down.sh    # stops every daemon by the PID in its pid file
#
# Environment: CALORIMETER_SLURM_DIR (default /tmp/calorimeter-slurm).
set -euo pipefail
T=${CALORIMETER_SLURM_DIR:-/tmp/calorimeter-slurm}
export SLURM_CONF=$T/etc/slurm.conf
ts() { date +%s.%N; }; T0=$(ts); lap() { printf 'slurm-up: %-24s %6.2fs\n' "$1" "$(awk "BEGIN{print $(ts) - $T0}")"; }
waitfor() { local what=$1; shift; for _ in $(seq 1 150); do "$@" >>"$T/log/waitfor.log" 2>&1 && return 0; sleep 0.2; done
            echo "slurm-up: TIMEOUT waiting for $what (see $T/log)" >&2; exit 1; }
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

# 3) fake GPUs: gres File= must be character devices -> clones of /dev/null (char 1:3)
for i in 0 1 2 3; do [ -c "$T/fakegpu/nvidia$i" ] || mknod "$T/fakegpu/nvidia$i" c 1 3; done

# 4) config. KillWait/MinJobAge are short so that cancelled and timed-out jobs end quickly in tests.
CPUS=$(nproc); MEM=$(( $(free -m | awk '/^Mem:/{print $2}') - 1024 ))
cat > "$T/etc/slurm.conf" <<CONF
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
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/run/slurmctld.pid
SlurmdPidFile=$T/run/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageTRES=gres/gpu
JobCompType=jobcomp/none
GresTypes=gpu
NodeName=localhost CPUs=$CPUS RealMemory=$MEM Gres=gpu:4 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
echo "NodeName=localhost Name=gpu File=$T/fakegpu/nvidia[0-3]" > "$T/etc/gres.conf"
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

# 5) slurmdbd -> register the cluster -> slurmctld -> slurmd (configless: fetches its config from slurmctld)
alive "$T/run/slurmdbd.pid" || slurmdbd
waitfor slurmdbd sacctmgr -n show cluster
sacctmgr -n -P show cluster format=cluster | grep -qx calorimeter || sacctmgr -i add cluster calorimeter >>"$T/log/waitfor.log" || true
lap "slurmdbd + cluster"
alive "$T/run/slurmctld.pid" || slurmctld
waitfor slurmctld scontrol ping
alive "$T/run/slurmd.pid" || env -u SLURM_CONF slurmd -N localhost --conf-server localhost:6817
waitfor "node idle" bash -c '[ "$(env -u SLURM_CONF sinfo -h -o %T)" = idle ]'
lap "slurmctld + slurmd idle"
env -u SLURM_CONF sinfo
