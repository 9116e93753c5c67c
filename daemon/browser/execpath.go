package browser

import (
	"os"
	"os/exec"
)

// chromiumBinaries are Chromium executables themselves, not the shell
// launchers on PATH. Debian's /usr/bin/chromium is a script that greps
// /proc/cpuinfo and refuses to start where it cannot read it, which is
// so under choird's systemd unit (ProcSubset=pid): the binary it
// launches needs no such file.
var chromiumBinaries = []string{"/usr/lib/chromium/chromium"}

// findChromium is the Chromium to start when the configuration names
// none: a binary from chromiumBinaries, else chromium, chromium-browser
// or google-chrome on PATH; "" when there is none.
func findChromium() string {
	for _, p := range chromiumBinaries {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}
