package policyroute

// Routes is what a kernel mode needs of this package: Kernel programs the
// node's, and tests of the modes' rules use None, which must not touch the
// host's routing.
type Routes interface {
	Ensure() error
	Present() (bool, error)
	Remove() error
}

// Kernel programs the calling thread's network namespace.
type Kernel struct{}

func (Kernel) Ensure() error          { return Ensure() }
func (Kernel) Present() (bool, error) { return Present() }
func (Kernel) Remove() error          { return Remove() }

// None programs nothing and reports the routes present.
type None struct{}

func (None) Ensure() error          { return nil }
func (None) Present() (bool, error) { return true, nil }
func (None) Remove() error          { return nil }
