//go:build !windows

package actors

import (
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/kproxy/kproxy/messages"
)

// Errnos that are hard to provoke in a test, wrapped as the net package
// wraps them.
func TestFailureClassifiesErrnos(t *testing.T) {
	for errno, want := range map[syscall.Errno]messages.FailureCode{
		syscall.EMFILE:       messages.FailureCode_FD_EXHAUSTED,
		syscall.ENFILE:       messages.FailureCode_FD_EXHAUSTED,
		syscall.EACCES:       messages.FailureCode_PERMISSION_DENIED,
		syscall.EPERM:        messages.FailureCode_PERMISSION_DENIED,
		syscall.EAFNOSUPPORT: messages.FailureCode_FAMILY_UNAVAILABLE,
		syscall.ECONNRESET:   messages.FailureCode_FAILURE_CODE_UNKNOWN,
	} {
		err := fmt.Errorf("open portal: %w", &os.SyscallError{Syscall: "socket", Err: errno})
		if got := failureCode(err, messages.FailureCode_FAILURE_CODE_UNKNOWN); got != want {
			t.Errorf("%v: code %v, want %v", errno, got, want)
		}
	}
}
