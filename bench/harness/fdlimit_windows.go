package harness

// fdLimit: Windows has no open-file limit of this kind.
func fdLimit() int64 { return 0 }

// RaiseFDLimit: nothing to raise on Windows.
func RaiseFDLimit() {}
