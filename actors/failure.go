package actors

import (
	"errors"
	"syscall"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
)

// failure is err as it crosses an actor boundary: its text, and the code of
// its kind. An error of no kind kproxy can tell gets the code otherwise,
// which names what failed (PROXY_PORT_UNAVAILABLE for an allocation).
func failure(err error, otherwise messages.FailureCode) *messages.Failure {
	if err == nil {
		return nil
	}
	return &messages.Failure{Code: failureCode(err, otherwise), Message: err.Error()}
}

// failureCode classifies err by the sentinel errors of the data path and
// the errnos the kernel answers with, however deeply they are wrapped.
func failureCode(err error, otherwise messages.FailureCode) messages.FailureCode {
	switch {
	case errors.Is(err, datapath.ErrUnsupportedProtocol):
		return messages.FailureCode_UNSUPPORTED_PROTOCOL
	case errors.Is(err, datapath.ErrPortRangeExhausted):
		return messages.FailureCode_PROXY_PORT_UNAVAILABLE
	case errors.Is(err, rules.ErrFamilyUnavailable):
		return messages.FailureCode_FAMILY_UNAVAILABLE
	}
	for _, e := range errnoCodes {
		if errors.Is(err, e.errno) {
			return e.code
		}
	}
	return otherwise
}

// errnoCode maps an errno to its failure code. The errnos' names differ
// per OS (failure_other.go, failure_windows.go); their meanings do not.
type errnoCode struct {
	errno syscall.Errno
	code  messages.FailureCode
}

var errnoCodes = []errnoCode{
	{errAddrInUse, messages.FailureCode_ADDRESS_IN_USE},
	{errAddrNotAvail, messages.FailureCode_ADDRESS_NOT_AVAILABLE},
	{errTooManyFiles, messages.FailureCode_FD_EXHAUSTED},
	{errFileTableFull, messages.FailureCode_FD_EXHAUSTED},
	{errAccess, messages.FailureCode_PERMISSION_DENIED},
	{errPerm, messages.FailureCode_PERMISSION_DENIED},
	{errAFNoSupport, messages.FailureCode_FAMILY_UNAVAILABLE},
	// Go's own errno where IPv6 is unavailable, on every OS.
	{syscall.EAFNOSUPPORT, messages.FailureCode_FAMILY_UNAVAILABLE},
}

// failureTexts is the text of failures, as ServicePortState.error carries it.
func failureTexts(fs []*messages.Failure) []string {
	texts := make([]string, 0, len(fs))
	for _, f := range fs {
		texts = append(texts, f.GetMessage())
	}
	return texts
}
