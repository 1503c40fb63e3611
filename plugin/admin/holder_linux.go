package admin

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// heldBy says which process listens on a TCP port, as Linux says it
// (/proc/net/tcp and tcp6: the listening socket's owner and inode; the
// process holding that inode among /proc/*/fd), "" when it does not say.
func heldBy(port uint16) string {
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		uid, inode, ok := listener(table, port)
		if !ok {
			continue
		}
		who := "uid " + uid
		if pid, comm := holderOf(inode); pid != "" {
			who = fmt.Sprintf("process %s (%s, %s)", pid, comm, who)
		}
		return who
	}
	return ""
}

// listener finds the listening socket of port in a /proc/net/tcp table:
// its owner's uid and its inode.
func listener(table string, port uint16) (uid, inode string, ok bool) {
	f, err := os.Open(table)
	if err != nil {
		return "", "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if len(fields) < 10 || fields[3] != "0A" { // TCP_LISTEN
			continue
		}
		_, hexPort, found := strings.Cut(fields[1], ":")
		if n, err := strconv.ParseUint(hexPort, 16, 16); found && err == nil && uint16(n) == port {
			return fields[7], fields[9], true
		}
	}
	return "", "", false
}

// holderOf is the process holding socket inode: its pid and name.
func holderOf(inode string) (pid, comm string) {
	want := "socket:[" + inode + "]"
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, proc := range procs {
		fds, _ := os.ReadDir(filepath.Join(proc, "fd"))
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(proc, "fd", fd.Name())); err == nil && l == want {
				name, _ := os.ReadFile(filepath.Join(proc, "comm"))
				return filepath.Base(proc), strings.TrimSpace(string(name))
			}
		}
	}
	return "", ""
}
