package main

import (
	"slices"
	"testing"
)

func TestWithSysmonSetting(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     []string
		want    []string
		changed bool
	}{
		{"no GODEBUG", []string{"PATH=/bin"}, []string{"PATH=/bin", "GODEBUG=" + sysmonSetting}, true},
		{"empty GODEBUG", []string{"GODEBUG=", "PATH=/bin"}, []string{"PATH=/bin", "GODEBUG=" + sysmonSetting}, true},
		{"other settings kept", []string{"GODEBUG=http2client=0,madvdontneed=1"}, []string{"GODEBUG=http2client=0,madvdontneed=1," + sysmonSetting}, true},
		{"the first of two is the one read", []string{"GODEBUG=gctrace=1", "GODEBUG=schedtrace=5"}, []string{"GODEBUG=gctrace=1," + sysmonSetting}, true},
		{"the operator's schedtrace wins", []string{"GODEBUG=schedtrace=0"}, []string{"GODEBUG=schedtrace=0"}, false},
		{"also among others", []string{"GODEBUG=gctrace=1, schedtrace=1000"}, []string{"GODEBUG=gctrace=1, schedtrace=1000"}, false},
		{"a prefix is another key", []string{"GODEBUG=schedtracex=1"}, []string{"GODEBUG=schedtracex=1," + sysmonSetting}, true},
	} {
		got, changed := withSysmonSetting(tc.env)
		if changed != tc.changed || !slices.Equal(got, tc.want) {
			t.Errorf("%s: withSysmonSetting(%q) = %q, %v; want %q, %v", tc.name, tc.env, got, changed, tc.want, tc.changed)
		}
	}
}
