package harness

import "os"

// terminateSignal: Windows has no SIGTERM for other processes; Stop falls
// back to killing.
var terminateSignal = os.Interrupt
