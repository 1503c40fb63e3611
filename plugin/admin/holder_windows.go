package admin

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/windows"
)

// heldBy says which process listens on a TCP port, as Windows says it
// (GetExtendedTcpTable with TCP_TABLE_OWNER_PID_LISTENER, IPv4 and IPv6:
// the owning process, then its image name), "" when it does not say.
func heldBy(port uint16) string {
	for _, af := range []uint32{windows.AF_INET, windows.AF_INET6} {
		if pid, ok := tcpOwner(af, port); ok {
			return fmt.Sprintf("process %d (%s)", pid, imageName(pid))
		}
	}
	return ""
}

const tcpTableOwnerPIDListener = 3

// tcpOwner reads the listening sockets of family af and returns the pid
// that owns port's.
func tcpOwner(af uint32, port uint16) (uint32, bool) {
	proc := windows.NewLazySystemDLL("iphlpapi.dll").NewProc("GetExtendedTcpTable")
	if proc.Find() != nil {
		return 0, false
	}
	size := uint32(0)
	_, _, _ = proc.Call(0, uintptr(unsafe.Pointer(&size)), 0, uintptr(af), tcpTableOwnerPIDListener, 0)
	if size == 0 {
		return 0, false
	}
	buf := make([]byte, size)
	if r, _, _ := proc.Call(uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0, uintptr(af), tcpTableOwnerPIDListener, 0); r != 0 {
		return 0, false
	}
	// MIB_TCPTABLE_OWNER_PID: dwNumEntries, then rows of dwState,
	// dwLocalAddr, dwLocalPort, dwRemoteAddr, dwRemotePort, dwOwningPid;
	// MIB_TCP6TABLE_OWNER_PID: rows of ucLocalAddr[16], dwLocalScopeId,
	// dwLocalPort, ucRemoteAddr[16], dwRemoteScopeId, dwRemotePort,
	// dwState, dwOwningPid. Ports are in network order in the low 16 bits.
	n := binary.LittleEndian.Uint32(buf)
	row, portAt, pidAt := 24, 8, 20
	if af == windows.AF_INET6 {
		row, portAt, pidAt = 56, 20, 52
	}
	for i := 0; i < int(n) && 4+(i+1)*row <= len(buf); i++ {
		r := buf[4+i*row:]
		if binary.BigEndian.Uint16(r[portAt:]) == port {
			return binary.LittleEndian.Uint32(r[pidAt:]), true
		}
	}
	return 0, false
}

// imageName is the process's executable name, or "?" when it cannot be read.
func imageName(pid uint32) string {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, pid)
	if err != nil {
		return "?"
	}
	defer windows.CloseHandle(h)
	buf := make([]uint16, windows.MAX_PATH)
	size := uint32(len(buf))
	if err := windows.QueryFullProcessImageName(h, 0, &buf[0], &size); err != nil {
		return "?"
	}
	return windows.UTF16ToString(buf[:size])
}
