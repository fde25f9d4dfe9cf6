#!/bin/sh
# mn-agent.sh HOST COMMAND... - the "ssh" of the multinode harness (hosts.sh).
#
# The MPI launchers start their remote daemons through it: Open MPI's
# mpirun as `--mca plm_rsh_agent mn-agent.sh` (it runs `AGENT HOST orted
# ...`), MPICH's hydra as `-launcher rsh -launcher-exec mn-agent.sh`
# (`AGENT HOST hydra_pmi_proxy ...`). HOST is what the hostfile names:
# the host's address (198.18.R.I), its name or its number. The agent finds
# the host in $MN_HOSTS (lines "NUMBER ADDRESS NAME NETNS", written by
# hosts_up), and runs COMMAND inside that host's network namespace, in
# UTS and IPC namespaces of its own (host name NAME): what the remote
# side of ssh would do. The IPC namespace is what keeps UCX (MPICH) off
# shared memory between hosts: it takes peers with the same boot id and
# IPC namespace for the same machine (sysv/posix/cma), whatever the host
# name. As with ssh, the words of COMMAND are joined with
# spaces and read by a shell (the launchers quote for that). Unlike ssh,
# the environment is inherited (MN_*, OMPI_*, PATH, LD_LIBRARY_PATH), and
# the file system is the same one on every host.
#
# Leading options (ssh's -x, -T, -n, as some launchers add for ssh/rsh)
# are ignored. Exit status: COMMAND's, or 255 (as ssh) when HOST is not
# one of this run's hosts.
set -u
while [ $# -gt 0 ]; do
    case $1 in
    -*) shift ;;
    *) break ;;
    esac
done
[ $# -ge 1 ] || { echo "mn-agent: usage: mn-agent.sh HOST COMMAND..." >&2; exit 255; }
: "${MN_HOSTS:?mn-agent: MN_HOSTS is not set (hosts_up writes it)}"
want=$1
shift
line=$(awk -v h="$want" '$1 == h || $2 == h || $3 == h { print; exit }' "$MN_HOSTS")
[ -n "$line" ] || { echo "mn-agent: $want is not a host of this run ($MN_HOSTS)" >&2; exit 255; }
set -- "$line" "$*"
name=$(echo "$1" | awk '{ print $3 }')
ns=$(echo "$1" | awk '{ print $4 }')
exec ip netns exec "$ns" unshare --uts --ipc sh -c 'hostname "$1" && exec sh -c "$2"' mn-agent "$name" "$2"
