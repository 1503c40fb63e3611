package sources

// eventsOnly: auto mode follows containerd's events without trying NRI:
// stock containerd on Windows (checked against v2.4.2) opens no NRI socket
// and sends no NRI pod events.
const eventsOnly = true
