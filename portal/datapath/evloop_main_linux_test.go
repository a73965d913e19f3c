package datapath

import (
	"fmt"
	"os"
	"testing"
)

// TestMain runs the package's tests twice: on the goroutine data path,
// then with every TCP proxy that can on the event loops.
func TestMain(m *testing.M) {
	if code := m.Run(); code != 0 {
		os.Exit(code)
	}
	fmt.Println("again, on the event loops")
	loopsEverywhere = true
	os.Exit(m.Run())
}
