package liveview

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
)

// static holds everything the page loads: no request leaves the machine.
//
//go:embed static
var static embed.FS

var pageTemplate = template.Must(template.ParseFS(static, "static/index.html"))

// pageData fills the page: the token for the fault buttons only for a page
// loaded from this host with fault injection on.
type pageData struct {
	Token string
}

func (v *view) page(w http.ResponseWriter, r *http.Request) {
	var d pageData
	if v.opts.Injector != nil && loopbackPeer(r) {
		d.Token = v.guard.token
	}
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, d); err != nil {
		httpError(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b.Bytes())
}

func staticFiles() http.Handler {
	sub, _ := fs.Sub(static, "static")
	return http.StripPrefix("/static/", http.FileServer(http.FS(sub)))
}
