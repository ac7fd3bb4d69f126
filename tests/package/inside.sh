# Run by tests/package/run.sh inside the booted Debian root (bash -s VERSION OLD_VERSION).
# Each check prints "inside: ok: ..." or fails with what it saw.
set -uo pipefail
version=$1
old_version=$2
KC=/var/lib/knap/kubeconfig

fail() { echo "inside: FAIL: $*" >&2; exit 1; }
ok() { echo "inside: ok: $*"; }
# Polls a command for up to $1 seconds.
until_ok() {
  local secs=$1; shift
  for _ in $(seq 1 "$((secs * 2))"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  return 1
}
knapd_pid() { systemctl show -p MainPID --value knapd; }
ksvc_uid() { kubectl --kubeconfig "$KC" get ksvc hello -o jsonpath='{.metadata.uid}'; }
ksvc_ready() {
  [[ "$(kubectl --kubeconfig "$KC" get ksvc hello -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}
installed_version() { dpkg-query -W -f='${Version}' knap 2>/dev/null; }

# --- install (the old version first, to upgrade from later) ---------------------------
apt-get install -y -q -o APT::Install-Recommends=true "/root/knap_${old_version}_amd64.deb" >/tmp/apt-install.log 2>&1 ||
  { tail -20 /tmp/apt-install.log; fail "apt-get install of the .deb failed"; }
[[ "$(installed_version)" == "$old_version" ]] || fail "dpkg says knap $(installed_version), want $old_version"
for dep in containerd runc containernetworking-plugins iptables; do
  dpkg-query -W -f='${Status}' "$dep" 2>/dev/null | grep -q "install ok installed" || fail "dependency $dep not installed"
done
ok "apt installed knap $old_version with containerd, runc, CNI plugins and iptables"

# postinst enabled and started it; Type=notify, so "active" means knapd sent READY=1.
systemctl is-enabled -q knapd || fail "knapd.service is not enabled"
until_ok 120 systemctl is-active -q knapd || { systemctl status knapd --no-pager; fail "knapd is not active"; }
ok "knapd enabled and active (READY=1 received): $(systemctl show -p StatusText --value knapd)"
for sock in knapd-router.socket knapd-api.socket; do
  if [[ -f /lib/systemd/system/$sock ]]; then
    systemctl is-enabled -q "$sock" && systemctl is-active -q "$sock" || fail "$sock not enabled and active"
    ok "$sock enabled and listening"
  fi
done
[[ "$(systemctl show -p WatchdogUSec --value knapd)" != 0 ]] || fail "knapd.service has no watchdog"
[[ -f /etc/knap/config.yaml ]] || fail "/etc/knap/config.yaml missing"
grep -q '^/etc/knap/config.yaml$' /var/lib/dpkg/info/knap.conffiles || fail "/etc/knap/config.yaml is not a conffile"
ok "/etc/knap/config.yaml is a conffile"

# --- the clients -----------------------------------------------------------------------
until_ok 60 test -s "$KC" || fail "no kubeconfig at $KC"
knap get services >/tmp/knap-get.txt 2>&1 || { cat /tmp/knap-get.txt; fail "knap get services failed"; }
kubectl --kubeconfig "$KC" apply -f /root/service.yaml || fail "kubectl apply failed"
until_ok 120 ksvc_ready || { kubectl --kubeconfig "$KC" get ksvc hello -o yaml; fail "Service hello not Ready"; }
knap get services | grep -q '^hello ' || { knap get services; fail "knap does not list hello"; }
ok "kubectl applied a Service; it is Ready; knap lists it"
uid=$(ksvc_uid)
[[ -n "$uid" ]] || fail "no uid for hello"

# --- journald: knapd's lines with their levels -----------------------------------------
# -p info..info selects PRIORITY=6 exactly; -o cat prints MESSAGE, which must not keep the "<6>".
ready=$(journalctl -u knapd -p info..info -o cat --no-pager | grep "knapd ready" | tail -1)
[[ -n "$ready" ]] || { journalctl -u knapd --no-pager | tail; fail "no 'knapd ready' line at PRIORITY 6 in journalctl -u knapd"; }
[[ "$ready" == "I "* ]] || fail "the level prefix was not taken by journald: $ready"
# (grep without -q reads all of journalctl's output: an early exit would SIGPIPE it, a failure under pipefail.)
journalctl -u knapd -p err..emerg -o cat --no-pager | grep -F "knapd ready" >/dev/null && fail "'knapd ready' logged at error level"
ok "journalctl -u knapd: '${ready:0:60}...' at PRIORITY 6 (info)"
# Every knapd log line (level letter, then a timestamp) is stored at its level's
# PRIORITY: D 7, I 6, W 4, E 3; none at another. _SYSTEMD_UNIT selects what
# knapd's processes wrote (not systemd's own lines about the unit). One snapshot
# (-o verbose: each entry's PRIORITY= and MESSAGE= fields) is read, because knapd
# keeps logging while this runs: counts taken by separate journalctl calls
# disagreed once in CI.
journalctl _SYSTEMD_UNIT=knapd.service -o verbose --no-pager >/tmp/knapd-journal.txt ||
  fail "journalctl _SYSTEMD_UNIT=knapd.service -o verbose failed"
# "<PRIORITY> <level letter>" for each knapd log line.
awk '
  function flush() {
    if (msg ~ /^[DIWE] [0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T/) print prio, substr(msg, 1, 1)
    prio = ""; msg = ""
  }
  /^[^ \t]/ { flush(); next }
  /^    PRIORITY=/ { prio = substr($0, 14) }
  /^    MESSAGE=/ { msg = substr($0, 13) }
  END { flush() }
' /tmp/knapd-journal.txt >/tmp/knapd-levels.txt
total=$(wc -l </tmp/knapd-levels.txt)
((total > 0)) || fail "no knapd log lines in journalctl _SYSTEMD_UNIT=knapd.service"
wrong=$(grep -v -x -E '7 D|6 I|4 W|3 E' /tmp/knapd-levels.txt | sort | uniq -c | head -5)
[[ -z "$wrong" ]] || fail "knapd log lines at a PRIORITY other than their level's (count, PRIORITY, level): $wrong"
levels=""
for letter in D I W E; do levels+=" $letter=$(grep -c " $letter\$" /tmp/knapd-levels.txt)"; done
ok "journalctl: all $total knapd log lines at their level's PRIORITY (lines per level:$levels)"

# --- restart keeps state ------------------------------------------------------------------
pid_before=$(knapd_pid)
systemctl restart knapd || fail "systemctl restart knapd failed"
systemctl is-active -q knapd || fail "knapd not active after restart"
[[ "$(knapd_pid)" != "$pid_before" ]] || fail "knapd's pid did not change on restart"
until_ok 60 ksvc_ready || fail "hello not Ready after restart"
[[ "$(ksvc_uid)" == "$uid" ]] || fail "hello's uid changed across restart"
journal_has() { journalctl -u knapd --no-pager | grep -F "$1" >/dev/null; }
until_ok 20 journal_has "shutting down" || fail "no shutdown line in the journal"
ok "systemctl restart knapd: new pid, hello kept (uid $uid)"
if [[ -f /lib/systemd/system/knapd-router.socket ]]; then
  # Socket activation: the listening sockets are systemd's, and the new knapd serves on them.
  for port in 8080 6443; do
    users=$(ss -Hltnp "sport = :$port")
    [[ "$users" == *'"systemd"'* && "$users" == *'"knapd"'* ]] ||
      fail "127.0.0.1:$port is not shared by systemd and knapd after the restart: $users"
  done
  ok "after the restart knapd serves on the sockets systemd holds (ss: 8080 and 6443 held by systemd and knapd)"
fi

# --- upgrade old -> new -------------------------------------------------------------------
pid_before=$(knapd_pid)
apt-get install -y -q "/root/knap_${version}_amd64.deb" >/tmp/apt-upgrade.log 2>&1 ||
  { tail -20 /tmp/apt-upgrade.log; fail "upgrade to $version failed"; }
[[ "$(installed_version)" == "$version" ]] || fail "dpkg says knap $(installed_version) after upgrade"
until_ok 120 systemctl is-active -q knapd || fail "knapd not active after upgrade"
[[ "$(knapd_pid)" != "$pid_before" ]] || fail "the upgrade did not restart knapd"
until_ok 60 ksvc_ready || fail "hello not Ready after upgrade"
[[ "$(ksvc_uid)" == "$uid" ]] || fail "hello's uid changed across the upgrade"
ok "upgrade $old_version -> $version restarted knapd and kept hello"

# --- remove keeps state, purge deletes it --------------------------------------------------
apt-get remove -y -q knap >/tmp/apt-remove.log 2>&1 || { tail -20 /tmp/apt-remove.log; fail "apt-get remove failed"; }
systemctl is-active -q knapd && fail "knapd still active after remove"
[[ ! -e /usr/bin/knapd ]] || fail "/usr/bin/knapd still there after remove"
[[ -f /var/lib/knap/knap.db ]] || fail "remove deleted /var/lib/knap/knap.db"
[[ -f /etc/knap/config.yaml ]] || fail "remove deleted the conffile"
ok "remove stopped knapd and kept /var/lib/knap and /etc/knap"
apt-get install -y -q "/root/knap_${version}_amd64.deb" >/tmp/apt-reinstall.log 2>&1 || fail "reinstall failed"
until_ok 120 systemctl is-active -q knapd || fail "knapd not active after reinstall"
until_ok 60 ksvc_ready || fail "hello not Ready after reinstall"
[[ "$(ksvc_uid)" == "$uid" ]] || fail "hello's uid changed across remove + install"
ok "reinstall brought hello back"
apt-get purge -y -q knap >/tmp/apt-purge.log 2>&1 || { tail -20 /tmp/apt-purge.log; fail "apt-get purge failed"; }
[[ ! -e /var/lib/knap ]] || fail "purge left /var/lib/knap"
[[ ! -e /etc/knap/config.yaml ]] || fail "purge left /etc/knap/config.yaml"
[[ -e /lib/systemd/system/knapd.service ]] && fail "purge left knapd.service"
ok "purge deleted /var/lib/knap and /etc/knap"
