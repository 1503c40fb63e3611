//go:build !windows

package sources

// eventsOnly: auto mode tries NRI first where the runtime may call it.
const eventsOnly = false
