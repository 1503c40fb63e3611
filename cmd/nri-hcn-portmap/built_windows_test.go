package main

// builtHere says whether a command is in this build: the simulator, a
// test double for Linux tests and demos, is not part of the Windows build
// (simulator_windows.go), so the documentation's simulator invocations are
// checked by the Linux run of TestDocsAreTrue.
func builtHere(cmd string) bool { return cmd != "simulator" }
