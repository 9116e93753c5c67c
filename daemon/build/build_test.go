package build_test

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"go.uber.org/goleak"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/build"
	"github.com/choirhq/choir/daemon/runtime"
	"github.com/choirhq/choir/daemon/runtime/docker"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// file is one file of a test repository.
type file struct {
	data string
	mode os.FileMode
}

func text(s string) file   { return file{data: s, mode: 0o644} }
func script(s string) file { return file{data: s, mode: 0o755} }

// link is a symbolic link to target, committed as git holds links.
func link(target string) file { return file{data: target, mode: os.ModeSymlink} }

// gitRepo is a real repository in a temporary directory.
type gitRepo struct {
	t   *testing.T
	dir string
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@choir.test",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@choir.test", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func newRepo(t *testing.T, files map[string]file) *gitRepo {
	t.Helper()
	r := &gitRepo{t: t, dir: t.TempDir()}
	git(t, r.dir, "init", "--quiet", "--initial-branch=main")
	// Unique content: two tests never share a commit, hence a base image.
	files = maps.Clone(files)
	files["unique.txt"] = text(runtimetest.RandomHex(8))
	r.commit(files)
	return r
}

// commit writes files (an empty data with mode 0 deletes) and commits.
func (r *gitRepo) commit(files map[string]file) string {
	r.t.Helper()
	for name, f := range files {
		p := filepath.Join(r.dir, name)
		if f.mode == 0 {
			os.Remove(p)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			os.Remove(p) // never write through a link
		}
		if f.mode&os.ModeSymlink != 0 {
			os.Remove(p)
			if err := os.Symlink(f.data, p); err != nil {
				r.t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			r.t.Fatal(err)
		}
		os.Chmod(p, f.mode)
	}
	git(r.t, r.dir, "add", "-A")
	git(r.t, r.dir, "commit", "--quiet", "-m", "change")
	return git(r.t, r.dir, "rev-parse", "HEAD")
}

func manifest(name, extra string) string {
	return `{"llm": {"name": "` + name + `", "description": "A test tool.", "parameters": {"type": "object", "properties": {}}},
 "runtime": {"timeout_ms": 5000, "side_effect": "read", "trust": "own", "version": "1.0"` + extra + `}}`
}

const skillJSON = `{"name": "review", "description": "Review something.", "initial_state": "work",
 "states": {"work": {"objective": "Do the work.", "allowed_tools": ["x.greet"], "transitions": [{"on": "complete", "to": "done"}]},
            "done": {"terminal": true}},
 "max_steps": 5, "interruptible": true}`

func globalFiles() map[string]file {
	return map[string]file{
		"Dockerfile.base": text("ARG CHOIR_OS_IMAGE=scratch\nFROM ${CHOIR_OS_IMAGE}\n" +
			"RUN echo base > /etc/choir-base && mkdir -p /choir/tools/global/bin && " +
			"printf '#!/bin/sh\\necho g\\n' > /choir/tools/global/bin/gcompiled && chmod 755 /choir/tools/global/bin/gcompiled\n"),
		"identity/USER.md":      text("# The user\n"),
		"identity/SOUL.md":      text("global soul\n"),
		"identity/SOUL-CORE.md": text("global core soul\n"),
		"tools/greet.json":      text(manifest("x.greet", "")),
		"tools/greet":           script("#!/bin/sh\necho hi\n"),
		"tools/shared.json":     text(manifest("x.shared", "")),
		"tools/shared":          script("#!/bin/sh\necho global\n"),
		"tools/gcompiled.json":  text(manifest("x.gcompiled", `, "exec_path": "bin/gcompiled"`)),
		"skills/review.json":    text(skillJSON),
	}
}

func agentFiles() map[string]file {
	return map[string]file{
		"Dockerfile": text("ARG CHOIR_BASE_IMAGE\nFROM ${CHOIR_BASE_IMAGE}\n" +
			"RUN mkdir -p /choir/tools/agent/bin && printf '#!/bin/sh\\necho compiled\\n' > /choir/tools/agent/bin/compiled && chmod 755 /choir/tools/agent/bin/compiled\n"),
		"identity/SOUL.md":      text("agent soul\n"),
		"tools/shared.json":     text(manifest("x.shared", "")),
		"tools/shared":          script("#!/bin/sh\necho agent\n"),
		"tools/compiled.json":   text(manifest("x.compiled", `, "exec_path": "bin/compiled"`)),
		"tools/compiled/main.c": text("int main(void) { return 0; }\n"),
	}
}

type testBundle struct {
	cli     *client.Client
	agentID string
	global  *gitRepo
	agent   *gitRepo
	builder *build.Builder
	osImage string
	bin     string
	home    string
}

// env is what every engine test shares: the engine, an OS image and the
// stand-in agent binary.
type env struct {
	cli     *client.Client
	osImage string
	bin     string
}

func newEnv(t *testing.T) *env {
	cli := runtimetest.RequireDocker(t)
	return &env{cli: cli, osImage: runtimetest.BusyboxImage(t, cli), bin: runtimetest.BuildAgent(t)}
}

func (e *env) setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{
		cli: e.cli, agentID: "b" + runtimetest.RandomHex(4), osImage: e.osImage, bin: e.bin,
		global: newRepo(t, globalFiles()), agent: newRepo(t, agentFiles()), home: t.TempDir(),
	}
	b.builder = b.newBuilder(t, e.cli)
	t.Cleanup(func() { b.removeImages(t) })
	return b
}

func (b *testBundle) newBuilder(t *testing.T, cli *client.Client) *build.Builder {
	t.Helper()
	bl, err := build.New(build.Options{Home: b.home, Docker: cli, AgentBinary: b.bin, OSImage: b.osImage})
	if err != nil {
		t.Fatal(err)
	}
	return bl
}

func (b *testBundle) request() build.Request {
	return build.Request{
		AgentID: b.agentID,
		Global:  config.Repo{URL: b.global.dir, Ref: "main"},            // a plain local path
		Agent:   config.Repo{URL: "file://" + b.agent.dir, Ref: "main"}, // a file:// URL
	}
}

func (b *testBundle) build(t *testing.T) build.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := b.builder.Build(ctx, b.request())
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return res
}

// removeImages removes an agent's images and the base images of every
// commit of its global repository, with their untagged parents.
func (b *testBundle) removeImages(t *testing.T) {
	ctx := context.Background()
	list, err := b.cli.ImageList(ctx, client.ImageListOptions{})
	if err != nil {
		t.Errorf("list images: %v", err)
		return
	}
	for _, img := range list.Items {
		for _, tag := range img.RepoTags {
			if strings.HasPrefix(tag, build.Repository(b.agentID)+":") || strings.HasPrefix(tag, build.Repository(b.agentID)+"-stage:") {
				runtimetest.RemoveImage(t, b.cli, tag)
			}
		}
	}
	osImg, err := b.cli.ImageInspect(ctx, b.osImage)
	if err != nil {
		t.Errorf("inspect OS image: %v", err)
		return
	}
	for _, c := range strings.Fields(git(t, b.global.dir, "rev-list", "--all")) {
		runtimetest.RemoveImage(t, b.cli, build.BaseImage(c, b.osImage, osImg.ID))
	}
}

// readFiles reads files of an image: content, "-> target" for a link;
// absent files are left out.
func readFiles(t *testing.T, cli *client.Client, image string, paths ...string) map[string]string {
	t.Helper()
	ctx := t.Context()
	c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: image, Labels: map[string]string{runtimetest.LabelTest: "1"}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatalf("create container of %s: %v", image, err)
	}
	defer cli.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true})
	out := map[string]string{}
	for _, p := range paths {
		res, err := cli.CopyFromContainer(ctx, c.ID, client.CopyFromContainerOptions{SourcePath: p})
		if err != nil {
			continue
		}
		tr := tar.NewReader(res.Content)
		hdr, err := tr.Next()
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeSymlink {
			out[p] = "-> " + hdr.Linkname
		} else {
			data, _ := io.ReadAll(tr)
			out[p] = string(data)
		}
		res.Content.Close()
	}
	return out
}

func readFile(t *testing.T, cli *client.Client, image, path string) (string, bool) {
	t.Helper()
	v, ok := readFiles(t, cli, image, path)[path]
	return v, ok
}

func TestBuild(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	t.Run("BakesSkipsAndRebuildsOnChange", func(t *testing.T) {
		t.Parallel()
		b := e.setup(t)
		res := b.build(t)
		if !res.Built || !res.BaseBuilt || res.ImageID == "" {
			t.Fatalf("first build: %+v", res)
		}
		v := res.Version
		if res.Image != build.Repository(b.agentID)+":"+v.ImageVersion || len(v.ImageVersion) != 12 {
			t.Errorf("image %s, version %s", res.Image, v.ImageVersion)
		}
		if v.GlobalRepoCommit != git(t, b.global.dir, "rev-parse", "HEAD") || v.AgentRepoCommit != git(t, b.agent.dir, "rev-parse", "HEAD") {
			t.Errorf("commits in version: %+v", v)
		}
		for _, h := range []string{v.ToolManifestHash, v.SkillManifestHash, v.IdentityHash, v.AgentBinaryHash} {
			if !strings.HasPrefix(h, "sha256:") {
				t.Errorf("hash %q", h)
			}
		}
		want := map[string]string{
			"/choir/USER.md":                    "# The user\n",
			"/choir/SOUL.md":                    "agent soul\n",
			"/choir/SOUL-CORE.md":               "global core soul\n",
			"/choir/tools/global/greet.json":    manifest("x.greet", ""),
			"/choir/tools/agent/shared":         "#!/bin/sh\necho agent\n",
			"/choir/tools/agent/bin/compiled":   "#!/bin/sh\necho compiled\n",
			"/choir/tools/global/bin/gcompiled": "#!/bin/sh\necho g\n",
			"/choir/skills/global/review.json":  skillJSON,
			"/choir/bin/git-cred-helper":        "-> choir-agent",
			"/etc/choir-base":                   "base\n",
		}
		overridden := []string{"/choir/tools/global/shared.json", "/choir/tools/global/shared"}
		files := readFiles(t, b.cli, res.Image, append(slices.Collect(maps.Keys(want)), overridden...)...)
		for p, w := range want {
			if got, ok := files[p]; !ok || got != w {
				t.Errorf("%s = %q (present %v), want %q", p, got, ok, w)
			}
		}
		for _, p := range overridden {
			if _, ok := files[p]; ok {
				t.Errorf("%s is baked although the agent overrides the tool", p)
			}
		}
		if len(res.DockerfileOutputs) != 2 {
			t.Errorf("dockerfile outputs %v", res.DockerfileOutputs)
		}
		got, err := build.VerifyImage(t.Context(), b.cli, res.Image, build.Expect{
			AgentID: b.agentID, ImageVersion: v.ImageVersion, GlobalRepoCommit: v.GlobalRepoCommit, AgentRepoCommit: v.AgentRepoCommit,
		})
		if err != nil || got != v {
			t.Fatalf("verify: %+v %v", got, err)
		}
		if latest, err := build.ReadVersion(t.Context(), b.cli, build.Repository(b.agentID)+":latest"); err != nil || latest != v {
			t.Errorf(":latest holds %+v (%v)", latest, err)
		}

		// The image runs under the docker runtime, hardened.
		rt, err := docker.New(t.Context(), docker.Options{Scope: "test-" + runtimetest.RandomHex(6)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			runtime.RemoveOrphans(context.Background(), rt, nil)
			rt.Close()
		})
		h := &runtimetest.Harness{Runtime: rt, Image: res.Image, Listener: runtimetest.NewListener(t)}
		_, conn := h.Start(t, h.NewSpec(t))
		if conn.Hello.Sandbox == nil {
			t.Fatal("no sandbox report")
		}
		if err := conn.Hello.Sandbox.Err(); err != nil {
			t.Errorf("sandbox inside the built image: %v", err)
		}

		again := b.build(t)
		if again.Built || again.BaseBuilt || again.Image != res.Image || again.ImageID != res.ImageID {
			t.Errorf("unchanged rebuild: %+v, want skipped %s", again, res.Image)
		}

		// A change in the agent's repository: a new image on the old base.
		first := again
		b.agent.commit(map[string]file{"identity/SOUL.md": text("a changed soul\n")})
		second := b.build(t)
		if !second.Built || second.BaseBuilt || second.Image == first.Image {
			t.Fatalf("after an agent repo change: %+v", second)
		}
		if second.Version.IdentityHash == first.Version.IdentityHash || second.Version.AgentRepoCommit == first.Version.AgentRepoCommit {
			t.Errorf("version did not follow the change: %+v", second.Version)
		}
		if got, _ := readFile(t, b.cli, second.Image, "/choir/SOUL.md"); got != "a changed soul\n" {
			t.Errorf("SOUL.md = %q", got)
		}
		if _, err := build.VerifyImage(t.Context(), b.cli, first.Image, build.Expect{AgentRepoCommit: second.Version.AgentRepoCommit}); !errors.Is(err, build.ErrVersionMismatch) {
			t.Errorf("verify old image against the new commit: %v", err)
		}

		b.global.commit(map[string]file{"tools/greet": script("#!/bin/sh\necho hello\n")})
		third := b.build(t)
		if !third.Built || !third.BaseBuilt || third.Version.ToolManifestHash == second.Version.ToolManifestHash {
			t.Fatalf("after a global repo change: %+v", third)
		}
	})

	// Several builds at once, by several builders (as several choirds, or
	// tests, share one engine), with identical layers: the classic builder
	// on fuse-overlayfs fails such builds now and then ("failed to get
	// digest ... no such file or directory") unless the builder serialises
	// and retries them.
	t.Run("ConcurrentBuildsAllSucceed", func(t *testing.T) {
		t.Parallel()
		const n = 4
		bundles := make([]*testBundle, n)
		for i := range bundles {
			bundles[i] = e.setup(t)
		}
		errs := make(chan error, n)
		for _, b := range bundles {
			go func() {
				ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
				defer cancel()
				res, err := b.builder.Build(ctx, b.request())
				if err == nil && (!res.Built || !res.BaseBuilt) {
					err = fmt.Errorf("agent %s: not built: %+v", b.agentID, res)
				}
				errs <- err
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("TransientEngineErrorIsRetried", func(t *testing.T) {
		t.Parallel()
		b := e.setup(t)
		const failures = 2
		cli, builds := flakyEngine(t, b.cli, failures)
		res, err := b.newBuilder(t, cli).Build(t.Context(), b.request())
		if err != nil {
			t.Fatalf("build through an engine that failed the first %d builds: %v", failures, err)
		}
		if !res.Built || !res.BaseBuilt {
			t.Errorf("not built: %+v", res)
		}
		// The base twice in vain, then the base, the agent's Dockerfile
		// and the final stage: five at least. The real engine may add a
		// transient failure of its own under load (the very kind this
		// retries), so more is no error.
		if got := builds.Load(); got < failures+3 {
			t.Errorf("%d builds sent to the engine, want at least %d", got, failures+3)
		}
	})

	t.Run("MCPFileAndInTreeLinksReachTheImage", func(t *testing.T) {
		t.Parallel()
		b := e.setup(t)
		const mcpJSON = `{"servers": {"files": {"command": "/usr/local/bin/files-mcp"}}}`
		b.agent.commit(map[string]file{".choir/mcp.json": text(mcpJSON), "identity/soul.txt": text("linked soul\n"),
			"identity/SOUL.md": link("soul.txt")})
		res := b.build(t)
		files := readFiles(t, b.cli, res.Image, "/choir/mcp.json", "/choir/SOUL.md")
		if files["/choir/mcp.json"] != mcpJSON || files["/choir/SOUL.md"] != "linked soul\n" {
			t.Errorf("image holds %q", files)
		}
		// A changed mcp.json is a new image.
		b.agent.commit(map[string]file{".choir/mcp.json": text(`{"servers": {}}`)})
		if res2 := b.build(t); res2.Version.ToolManifestHash == res.Version.ToolManifestHash || !res2.Built {
			t.Errorf("mcp.json changed, tool hash %s -> %s, built %v", res.Version.ToolManifestHash, res2.Version.ToolManifestHash, res2.Built)
		}
	})

	t.Run("LinkToAHostFileNeverReachesTheImage", func(t *testing.T) {
		t.Parallel()
		b := e.setup(t)
		hostFile, _ := canary(t)
		b.agent.commit(map[string]file{"identity/SOUL.md": link(hostFile)})
		_, err := b.builder.Build(t.Context(), b.request())
		if !errors.Is(err, build.ErrInvalidRepo) || !strings.Contains(err.Error(), "agent repo identity/SOUL.md") {
			t.Fatalf("build: %v, want the link refused naming identity/SOUL.md", err)
		}
		if _, err := b.cli.ImageInspect(t.Context(), build.Repository(b.agentID)+":latest"); err == nil {
			t.Error("an image was tagged")
		}
	})

	t.Run("NoAgentRepo", func(t *testing.T) {
		t.Parallel()
		b := e.setup(t)
		req := b.request()
		req.Agent = config.Repo{}
		res, err := b.builder.Build(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Version.AgentRepoCommit != "" {
			t.Errorf("agent commit %q", res.Version.AgentRepoCommit)
		}
		if got, _ := readFile(t, b.cli, res.Image, "/choir/SOUL.md"); got != "global soul\n" {
			t.Errorf("SOUL.md = %q, want the global one", got)
		}
	})

	t.Run("FailingDockerfileShowsLogTail", func(t *testing.T) {
		t.Parallel()
		b := e.setup(t)
		b.agent.commit(map[string]file{"Dockerfile": text("ARG CHOIR_BASE_IMAGE\nFROM ${CHOIR_BASE_IMAGE}\nRUN echo marker-before-failure && exit 3\n")})
		_, err := b.builder.Build(t.Context(), b.request())
		var de *build.DockerfileError
		if !errors.As(err, &de) {
			t.Fatalf("err = %v, want *DockerfileError", err)
		}
		if de.Stage != "agent" || !strings.Contains(err.Error(), "agent repo Dockerfile") ||
			!strings.Contains(err.Error(), "marker-before-failure") || !strings.Contains(err.Error(), "non-zero code: 3") {
			t.Errorf("error does not show the failure and its log:\n%v", err)
		}
		if _, err := b.cli.ImageInspect(t.Context(), build.Repository(b.agentID)+":latest"); err == nil {
			t.Errorf("a failed build left an image tagged latest")
		}
	})

	t.Run("MissingDockerfileOutputFails", func(t *testing.T) {
		t.Parallel()
		b := e.setup(t)
		b.agent.commit(map[string]file{"tools/ghost.json": text(manifest("x.ghost", `, "exec_path": "bin/ghost"`))})
		_, err := b.builder.Build(t.Context(), b.request())
		if !errors.Is(err, build.ErrInvalidRepo) || !strings.Contains(err.Error(), "/choir/tools/agent/bin/ghost") {
			t.Fatalf("err = %v", err)
		}
		if _, err := b.cli.ImageInspect(t.Context(), build.Repository(b.agentID)+":latest"); err == nil {
			t.Errorf("an image missing a tool is tagged latest")
		}
	})

}

// flakyEngine is a proxy to the engine of cli that answers the first
// failures image builds as the engine does when two classic-builder builds
// race on fuse-overlayfs, and passes everything else on. It returns a
// client of the proxy and the count of builds it received.
func flakyEngine(t *testing.T, cli *client.Client, failures int32) (*client.Client, *atomic.Int32) {
	t.Helper()
	u, err := url.Parse(cli.DaemonHost())
	if err != nil {
		t.Fatal(err)
	}
	network, addr := "tcp", u.Host
	if u.Scheme == "unix" {
		network, addr = "unix", u.Path
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	proxy := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker" },
		Transport:     tr,
		FlushInterval: -1,
	}
	builds := &atomic.Int32{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/build") && builds.Add(1) <= failures {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			const msg = "failed to get digest sha256:4f2b0c1e: open /var/lib/docker/image/fuse-overlayfs/layerdb/tmp/write-set-1/diff: no such file or directory"
			io.WriteString(w, `{"stream":"Step 1/3 : ARG CHOIR_OS_IMAGE=scratch\n"}`+"\n"+
				`{"errorDetail":{"message":"`+msg+`"},"error":"`+msg+`"}`+"\n")
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	// A short directory: a socket path may not exceed 107 bytes.
	dir, err := os.MkdirTemp("", "engine")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, "engine.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	pcli, err := client.New(client.WithHost("unix://"+filepath.Join(dir, "engine.sock")), client.WithVersion(cli.ClientVersion()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pcli.Close() })
	return pcli, builds
}
