package harness

import (
	"errors"
	"io"
)

// WriteHTML writes the report with charts.
func (r *Report) WriteHTML(w io.Writer) error { return errors.New("html: not yet") }
