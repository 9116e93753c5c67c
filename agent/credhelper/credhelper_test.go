package credhelper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const testToken = "ghp_canary_7d1f0a"

// TestMain turns the test binary into the helper when it is run under the
// helper's name, so that a real git can call it.
func TestMain(m *testing.M) {
	if Invoked(os.Args[0]) {
		h := &Helper{
			AllowedHosts: strings.Split(os.Getenv("CREDHELPER_TEST_ALLOWED"), ","),
			Username:     os.Getenv("CREDHELPER_TEST_USER"),
			TokenFunc: func(context.Context, Request) (string, error) {
				return os.Getenv("CREDHELPER_TEST_TOKEN"), nil
			},
		}
		if err := h.Run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", Name, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func helper(hosts ...string) *Helper {
	return &Helper{
		AllowedHosts: hosts,
		TokenFunc:    func(context.Context, Request) (string, error) { return testToken, nil },
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		h       *Helper
		args    []string
		in      string
		out     string
		stderr  string
		wantErr string
	}{
		{
			name: "AllowedHostGetsToken",
			h:    helper("github.com"),
			args: []string{"get"},
			in:   "protocol=https\nhost=github.com\npath=org/repo.git\n\n",
			out:  "username=x-access-token\npassword=" + testToken + "\n",
		},
		{
			name: "HostIsCaseInsensitiveAndDefaultPortIsSameHost",
			h:    helper("GitHub.com"),
			args: []string{"get"},
			in:   "protocol=https\nhost=github.com:443\n",
			out:  "username=x-access-token\npassword=" + testToken + "\n",
		},
		{
			name: "ConfiguredUsername",
			h:    &Helper{AllowedHosts: []string{"git.example.com:8443"}, Username: "oauth2", TokenFunc: helper().TokenFunc},
			args: []string{"get"},
			in:   "protocol=https\nhost=git.example.com:8443\n",
			out:  "username=oauth2\npassword=" + testToken + "\n",
		},
		{
			name:   "OtherHostGetsNothing",
			h:      helper("github.com"),
			args:   []string{"get"},
			in:     "protocol=https\nhost=evil.example\n\n",
			stderr: "host evil.example is not the allowed remote host (github.com)",
		},
		{
			name:   "LookalikeHostGetsNothing",
			h:      helper("github.com"),
			args:   []string{"get"},
			in:     "protocol=https\nhost=github.com.evil.example\n",
			stderr: "not the allowed remote host",
		},
		{
			name:   "OtherPortGetsNothing",
			h:      helper("github.com"),
			args:   []string{"get"},
			in:     "protocol=https\nhost=github.com:8443\n",
			stderr: "not the allowed remote host",
		},
		{
			name:   "PlainHTTPGetsNothing",
			h:      helper("github.com"),
			args:   []string{"get"},
			in:     "protocol=http\nhost=github.com\n",
			stderr: `protocol "http", only https may carry the token`,
		},
		{
			name:   "NoAllowedHostsGetsNothing",
			h:      helper(),
			args:   []string{"get"},
			in:     "protocol=https\nhost=github.com\n",
			stderr: "no remote host is allowed",
		},
		{
			name: "URLAttributeIsSplit",
			h:    helper("github.com"),
			args: []string{"get"},
			in:   "url=https://bob@github.com/org/repo.git\n",
			out:  "username=x-access-token\npassword=" + testToken + "\n",
		},
		{
			name: "StoreAndEraseAreIgnored",
			h:    helper("github.com"),
			args: []string{"store"},
			in:   "protocol=https\nhost=github.com\nusername=u\npassword=p\n",
		},
		{
			name: "UnknownActionIsIgnored",
			h:    helper("github.com"),
			args: []string{"frobnicate"},
			in:   "protocol=https\nhost=github.com\n",
		},
		{
			name:    "MissingActionIsAnError",
			h:       helper("github.com"),
			wantErr: "usage: git-cred-helper get|store|erase",
		},
		{
			name:    "MalformedLineIsAnError",
			h:       helper("github.com"),
			args:    []string{"get"},
			in:      "protocol https\n",
			wantErr: `line "protocol https" is not key=value`,
		},
		{
			name: "TokenWithNewlineIsRefused",
			h: &Helper{AllowedHosts: []string{"github.com"}, TokenFunc: func(context.Context, Request) (string, error) {
				return "abc\nhost=evil", nil
			}},
			args:    []string{"get"},
			in:      "protocol=https\nhost=github.com\n",
			wantErr: "token contains a newline",
		},
		{
			name: "TokenSourceErrorIsReported",
			h: &Helper{AllowedHosts: []string{"github.com"}, TokenFunc: func(context.Context, Request) (string, error) {
				return "", errors.New("secret store empty")
			}},
			args:    []string{"get"},
			in:      "protocol=https\nhost=github.com\n",
			wantErr: "read git token: secret store empty",
		},
		{
			name: "EmptyTokenGetsNothing",
			h: &Helper{AllowedHosts: []string{"github.com"}, TokenFunc: func(context.Context, Request) (string, error) {
				return "", nil
			}},
			args:   []string{"get"},
			in:     "protocol=https\nhost=github.com\n",
			stderr: "has no token",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			err := tt.h.Run(t.Context(), tt.args, strings.NewReader(tt.in), &out, &errOut)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), testToken) {
					t.Fatalf("error leaks the token: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out.String() != tt.out {
				t.Errorf("stdout = %q, want %q", out.String(), tt.out)
			}
			if !strings.Contains(errOut.String(), tt.stderr) || (tt.stderr == "" && errOut.Len() > 0) {
				t.Errorf("stderr = %q, want %q", errOut.String(), tt.stderr)
			}
			if strings.Contains(errOut.String(), testToken) {
				t.Errorf("stderr leaks the token")
			}
		})
	}
}

func TestInvoked(t *testing.T) {
	t.Parallel()
	for argv0, want := range map[string]bool{
		"git-cred-helper":                 true,
		"/choir/bin/git-cred-helper":      true,
		"./git-cred-helper":               true,
		"choir-agent":                     false,
		"/usr/local/bin/git-cred-helper2": false,
	} {
		if got := Invoked(argv0); got != want {
			t.Errorf("Invoked(%q) = %v, want %v", argv0, got, want)
		}
	}
}

// gitFill runs `git credential fill` with an isolated configuration whose
// only credential helper is this test binary, linked as git-cred-helper.
func gitFill(t *testing.T, input string, env ...string) (string, string, error) {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	link := filepath.Join(dir, Name)
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "gitconfig")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("[credential]\n\thelper = %s\n", link)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), gitBin, "credential", "fill")
	cmd.Env = append([]string{
		"HOME=" + dir,
		"PATH=" + os.Getenv("PATH"),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=" + cfg,
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=",
		"SSH_ASKPASS=",
		"CREDHELPER_TEST_TOKEN=" + testToken,
	}, env...)
	cmd.Stdin = strings.NewReader(input)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// TestWithGit lets a real git call the helper.
func TestWithGit(t *testing.T) {
	t.Parallel()
	t.Run("AllowedHostFilled", func(t *testing.T) {
		t.Parallel()
		out, stderr, err := gitFill(t, "protocol=https\nhost=github.com\npath=org/repo.git\n\n",
			"CREDHELPER_TEST_ALLOWED=github.com")
		if err != nil {
			t.Fatalf("git credential fill: %v\n%s", err, stderr)
		}
		for _, want := range []string{"protocol=https\n", "host=github.com\n", "username=x-access-token\n", "password=" + testToken + "\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("output %q lacks %q", out, want)
			}
		}
	})
	t.Run("URLFormFilled", func(t *testing.T) {
		t.Parallel()
		out, stderr, err := gitFill(t, "url=https://git.example.com:8443/a/b.git\n\n",
			"CREDHELPER_TEST_ALLOWED=git.example.com:8443", "CREDHELPER_TEST_USER=oauth2")
		if err != nil {
			t.Fatalf("git credential fill: %v\n%s", err, stderr)
		}
		if !strings.Contains(out, "username=oauth2\npassword="+testToken+"\n") {
			t.Errorf("output %q", out)
		}
	})
	t.Run("OtherHostRefused", func(t *testing.T) {
		t.Parallel()
		out, stderr, err := gitFill(t, "protocol=https\nhost=evil.example\n\n",
			"CREDHELPER_TEST_ALLOWED=github.com")
		if err == nil {
			t.Fatalf("git credential fill succeeded: %q", out)
		}
		if strings.Contains(out+stderr, testToken) {
			t.Fatalf("token leaked: out %q stderr %q", out, stderr)
		}
		if !strings.Contains(stderr, "git-cred-helper: credentials denied: host evil.example is not the allowed remote host (github.com)") {
			t.Errorf("stderr %q does not explain the refusal", stderr)
		}
	})
	t.Run("HTTPRefused", func(t *testing.T) {
		t.Parallel()
		_, stderr, err := gitFill(t, "protocol=http\nhost=github.com\n\n", "CREDHELPER_TEST_ALLOWED=github.com")
		if err == nil || strings.Contains(stderr, testToken) {
			t.Fatalf("err %v, stderr %q", err, stderr)
		}
	})
}
