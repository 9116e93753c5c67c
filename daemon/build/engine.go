package build

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/choirhq/choir/daemon/runtime/docker"
	"github.com/choirhq/choir/rpc/admin"
)

// finalDockerfile adds the merged /choir to the agent's image. The parent
// comes in as a build argument; no parser directive (# syntax=) ever.
const finalDockerfile = `ARG ` + argFrom + `
FROM ${` + argFrom + `}
COPY choir /choir
ENTRYPOINT ["` + AgentBinary + `"]
`

const finalDockerfileName = ".choir-final.Dockerfile"

// DockerfileError reports a Dockerfile the engine failed to build, with
// the end of its log.
type DockerfileError struct {
	// Stage is "base", "agent" or "final".
	Stage string
	// Dockerfile names the file: "global repo Dockerfile.base", ...
	Dockerfile string
	// Message is the engine's error.
	Message string
	// LogTail is the end of the build output.
	LogTail []string
}

func (e *DockerfileError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "build %s failed: %s", e.Dockerfile, e.Message)
	if len(e.LogTail) > 0 {
		fmt.Fprintf(&b, "\n--- last %d lines of the build log ---\n%s", len(e.LogTail), strings.Join(e.LogTail, "\n"))
	}
	return b.String()
}

// Build runs the whole pipeline for req (see the package documentation).
func (b *Builder) Build(ctx context.Context, req Request) (Result, error) {
	unlock := b.lockPath("agent:" + req.AgentID)
	defer unlock()
	if b.opts.Docker == nil {
		return Result{}, errors.New("agent build: no Docker engine client")
	}
	p, err := b.Prepare(ctx, req)
	if err != nil {
		return Result{}, err
	}
	defer p.Close()
	v := p.Version

	if v.OSImage != "" {
		img, err := b.opts.Docker.ImageInspect(ctx, v.OSImage)
		switch {
		case cerrdefs.IsNotFound(err):
			return Result{}, fmt.Errorf("agent build %s: OS image %s is not in the local engine (images are never pulled): import one, e.g. with scripts/agent-base-image.sh", req.AgentID, v.OSImage)
		case err != nil:
			return Result{}, b.engineErr("agent build "+req.AgentID+": inspect OS image", err)
		}
		v.OSImageID = img.ID
	}
	v.BaseImage = BaseImage(v.GlobalRepoCommit, v.OSImage, v.OSImageID)
	v.ImageVersion = computeImageVersion(v)
	image := Repository(req.AgentID) + ":" + v.ImageVersion
	res := Result{Image: image, Version: v, DockerfileOutputs: p.DockerfileOutputs}

	if !req.Force {
		if id, ok, err := b.existing(ctx, image, v); err != nil {
			return Result{}, err
		} else if ok {
			b.log.Info("agent image up to date; build skipped", slog.String("agent_id", req.AgentID), slog.String("image", image))
			res.ImageID = id
			if err := b.tag(ctx, id, Repository(req.AgentID)+":latest"); err != nil {
				return Result{}, err
			}
			return res, nil
		}
	}

	built, err := b.buildBase(ctx, req.AgentID, p.globalTree, v, req.Force)
	if err != nil {
		return Result{}, err
	}
	res.BaseBuilt = built

	// The agent's Dockerfile, if it has one, FROM the base.
	from := v.BaseImage
	if p.agentTree != "" && isFile(filepath.Join(p.agentTree, "Dockerfile")) {
		stage := Repository(req.AgentID) + "-stage:" + v.ImageVersion
		b.log.Info("building the agent's Dockerfile", slog.String("agent_id", req.AgentID), slog.String("agent_commit", short(v.AgentRepoCommit)))
		base := v.BaseImage
		if _, err := b.imageBuild(ctx, "agent", "agent repo Dockerfile", p.agentTree, "Dockerfile",
			map[string]*string{ArgBaseImage: &base}, []string{stage}, nil); err != nil {
			return Result{}, fmt.Errorf("agent build %s: %w", req.AgentID, err)
		}
		// The final image keeps the stage as its parent; only the tag goes.
		defer b.untag(context.WithoutCancel(ctx), stage)
		from = stage
	}

	// The final stage: /choir, version.json, the entrypoint.
	vj, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return Result{}, err
	}
	if err := os.WriteFile(filepath.Join(p.staged.dir, "choir", "version.json"), append(vj, '\n'), 0o644); err != nil {
		return Result{}, err
	}
	if err := os.WriteFile(filepath.Join(p.staged.dir, finalDockerfileName), []byte(finalDockerfile), 0o644); err != nil {
		return Result{}, err
	}
	compact, _ := json.Marshal(v)
	labels := map[string]string{LabelAgentID: req.AgentID, LabelImageVersion: v.ImageVersion, LabelVersion: string(compact)}
	id, err := b.imageBuild(ctx, "final", "the /choir stage", p.staged.dir, finalDockerfileName,
		map[string]*string{argFrom: &from}, []string{image, Repository(req.AgentID) + ":latest"}, labels)
	if err != nil {
		return Result{}, fmt.Errorf("agent build %s: %w", req.AgentID, err)
	}
	res.ImageID, res.Built = id, true

	// What a Dockerfile had to produce must be there, and version.json
	// must read back as written.
	if err := b.checkImage(ctx, image, v, p.DockerfileOutputs); err != nil {
		b.untag(context.WithoutCancel(ctx), image)
		b.untag(context.WithoutCancel(ctx), Repository(req.AgentID)+":latest")
		return Result{}, fmt.Errorf("agent build %s: %w", req.AgentID, err)
	}
	b.log.Info("agent image built", slog.String("agent_id", req.AgentID), slog.String("image", image))
	return res, nil
}

// buildBase builds the base image from the global repo's Dockerfile.base,
// only when its key (global commit, OS image) is new, or when forced. It
// reports whether it built.
func (b *Builder) buildBase(ctx context.Context, agentID, globalDir string, v admin.BuildVersion, force bool) (bool, error) {
	_, err := b.opts.Docker.ImageInspect(ctx, v.BaseImage)
	if err != nil && !cerrdefs.IsNotFound(err) && !force {
		return false, b.engineErr("agent build "+agentID+": inspect base image", err)
	}
	if err == nil && !force {
		return false, nil
	}
	args := map[string]*string{}
	if v.OSImage != "" {
		args[ArgOSImage] = &v.OSImage
	}
	b.log.Info("building the base image", slog.String("image", v.BaseImage), slog.String("global_commit", short(v.GlobalRepoCommit)))
	// No labels: each would cost the classic builder a step; the tag
	// is the key, and version.json names the global commit.
	if _, err := b.imageBuild(ctx, "base", "global repo Dockerfile.base", globalDir, "Dockerfile.base", args,
		[]string{v.BaseImage}, nil); err != nil {
		return false, fmt.Errorf("agent build %s: %w", agentID, err)
	}
	return true, nil
}

// existing reports whether image exists with the same version label.
func (b *Builder) existing(ctx context.Context, image string, v admin.BuildVersion) (string, bool, error) {
	img, err := b.opts.Docker.ImageInspect(ctx, image)
	if cerrdefs.IsNotFound(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, b.engineErr("agent build "+v.AgentID+": inspect image", err)
	}
	if img.Config == nil {
		return "", false, nil
	}
	var have admin.BuildVersion
	if json.Unmarshal([]byte(img.Config.Labels[LabelVersion]), &have) != nil || have != v {
		return "", false, nil
	}
	return img.ID, true, nil
}

func (b *Builder) tag(ctx context.Context, id, ref string) error {
	if _, err := b.opts.Docker.ImageTag(ctx, client.ImageTagOptions{Source: id, Target: ref}); err != nil {
		return b.engineErr("tag "+ref, err)
	}
	return nil
}

// untag removes a tag, keeping the image if something else uses it.
func (b *Builder) untag(ctx context.Context, ref string) {
	if _, err := b.opts.Docker.ImageRemove(ctx, ref, client.ImageRemoveOptions{PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
		b.log.Warn("remove image tag", slog.String("image", ref), slog.Any("error", err))
	}
}

func (b *Builder) engineErr(op string, err error) error {
	if client.IsErrConnectionFailed(err) {
		return fmt.Errorf("%s: %w", op, &docker.EngineError{Host: b.opts.Docker.DaemonHost(), Err: err})
	}
	return fmt.Errorf("%s: %w", op, err)
}

// buildMessage is one line of the engine's build stream.
type buildMessage struct {
	Stream      string `json:"stream"`
	Status      string `json:"status"`
	Error       string `json:"error"`
	ErrorDetail *struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
	Aux json.RawMessage `json:"aux"`
}

// engineBuilds admits one classic-builder build at a time in this process,
// whatever Builder asks. On a fuse-overlayfs engine two builds committing
// identical layers at once can fail with "failed to get digest ... no such
// file or directory", and choird builds several agents at once
// (update-all) through Builders of its own; the serialisation costs little,
// since the engine's builds contend for the same disk anyway.
var engineBuilds = make(chan struct{}, 1)

// Retries of a build that failed with a transient engine error.
const (
	buildAttempts = 4
	buildBackoff  = 500 * time.Millisecond
)

// transientBuildErrors are the engine's messages for a build that failed on
// the engine's side, not the Dockerfile's, and may succeed when run again.
// The engine reports them only as text in the build stream, so they are
// matched as text. Builds elsewhere (another choird or the docker CLI on
// the same engine) are not serialised with ours: the retry covers them.
var transientBuildErrors = []string{"failed to get digest"}

func transientBuild(err error) bool {
	var de *DockerfileError
	if !errors.As(err, &de) {
		return false
	}
	for _, m := range transientBuildErrors {
		if strings.Contains(de.Message, m) {
			return true
		}
	}
	return false
}

// imageBuild sends dir as the context and builds dockerfile with the
// classic builder, one build of this process at a time, running it again
// after a transient engine error. It returns the image ID.
func (b *Builder) imageBuild(ctx context.Context, stage, what, dir, dockerfile string, args map[string]*string, tags []string, labels map[string]string) (string, error) {
	for attempt := 1; ; attempt++ {
		select {
		case engineBuilds <- struct{}{}:
		case <-ctx.Done():
			return "", fmt.Errorf("build %s: waiting for another build: %w", what, ctx.Err())
		}
		id, err := b.imageBuildOnce(ctx, stage, what, dir, dockerfile, args, tags, labels)
		<-engineBuilds
		if err == nil || !transientBuild(err) || attempt == buildAttempts {
			return id, err
		}
		b.log.Warn("image build failed on the engine's side; building again", slog.String("dockerfile", what),
			slog.Int("attempt", attempt), slog.Any("error", err))
		select {
		case <-time.After(time.Duration(attempt) * buildBackoff):
		case <-ctx.Done():
			return "", err
		}
	}
}

// imageBuildOnce is one build of imageBuild.
func (b *Builder) imageBuildOnce(ctx context.Context, stage, what, dir, dockerfile string, args map[string]*string, tags []string, labels map[string]string) (string, error) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeContext(pw, dir)) }()
	defer pr.Close()
	resp, err := b.opts.Docker.ImageBuild(ctx, pr, client.ImageBuildOptions{
		Tags:        tags,
		Dockerfile:  dockerfile,
		BuildArgs:   args,
		Labels:      labels,
		Remove:      true,
		ForceRemove: true,
		PullParent:  false,
		Version:     build.BuilderV1,
	})
	if err != nil {
		pr.CloseWithError(err)
		return "", b.engineErr("build "+what, err)
	}
	defer resp.Body.Close()

	tail := newTail(b.opts.LogTailLines)
	var id string
	dec := json.NewDecoder(resp.Body)
	for {
		var m buildMessage
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return "", b.engineErr("build "+what+": read the build output", err)
		}
		if m.Stream != "" {
			tail.write(m.Stream)
			if b.opts.Progress != nil {
				io.WriteString(b.opts.Progress, m.Stream)
			}
		}
		if m.Error != "" || m.ErrorDetail != nil {
			msg := m.Error
			if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
				msg = m.ErrorDetail.Message
			}
			return "", &DockerfileError{Stage: stage, Dockerfile: what, Message: strings.TrimSpace(msg), LogTail: tail.lines()}
		}
		if len(m.Aux) > 0 {
			var aux struct{ ID string }
			if json.Unmarshal(m.Aux, &aux) == nil && aux.ID != "" {
				id = aux.ID
			}
		}
	}
	if id == "" && len(tags) > 0 {
		img, err := b.opts.Docker.ImageInspect(ctx, tags[0])
		if err != nil {
			return "", &DockerfileError{Stage: stage, Dockerfile: what, Message: "the build produced no image: " + err.Error(), LogTail: tail.lines()}
		}
		id = img.ID
	}
	return id, nil
}

// logTail keeps the last n lines of a stream.
type logTail struct {
	n       int
	buf     []string
	partial string
}

func newTail(n int) *logTail { return &logTail{n: n} }

func (t *logTail) write(s string) {
	s = t.partial + s
	t.partial = ""
	for line := range strings.Lines(s) {
		if !strings.HasSuffix(line, "\n") {
			t.partial = line
			break
		}
		if line = strings.TrimRight(line, "\r\n"); strings.TrimSpace(line) != "" {
			t.buf = append(t.buf, line)
		}
	}
	if len(t.buf) > t.n {
		t.buf = t.buf[len(t.buf)-t.n:]
	}
}

func (t *logTail) lines() []string {
	out := append([]string(nil), t.buf...)
	if strings.TrimSpace(t.partial) != "" {
		out = append(out, t.partial)
	}
	if len(out) > t.n {
		out = out[len(out)-t.n:]
	}
	return out
}

// writeContext writes dir as a tar stream: regular files, directories and
// symbolic links, owned by root, with a fixed time; .git left out.
func writeContext(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	epoch := time.Unix(0, 0)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		if rel == ".git" {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !fi.Mode().IsRegular() && !fi.IsDir() {
			return nil
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = epoch, time.Time{}, time.Time{}
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write build context %s: %w", dir, err)
	}
	return tw.Close()
}

// checkImage verifies a fresh image: version.json reads back as v and
// every Dockerfile output exists as an executable file.
func (b *Builder) checkImage(ctx context.Context, image string, v admin.BuildVersion, outputs []string) error {
	return withContainer(ctx, b.opts.Docker, image, func(id string) error {
		got, err := readVersion(ctx, b.opts.Docker, id)
		if err != nil {
			return err
		}
		if got != v {
			return fmt.Errorf("%s in the new image does not match what was baked", VersionFile)
		}
		var missing []string
		for _, out := range outputs {
			st, err := b.opts.Docker.ContainerStatPath(ctx, id, client.ContainerStatPathOptions{Path: out})
			if err != nil || !st.Stat.Mode.IsRegular() || st.Stat.Mode.Perm()&0o111 == 0 {
				missing = append(missing, out)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%w: tool executables that no repository holds and no Dockerfile produced: %s (build them in Dockerfile.base or the agent's Dockerfile, or fix runtime.exec_path)",
				ErrInvalidRepo, strings.Join(missing, ", "))
		}
		return nil
	})
}

// withContainer creates a container of image without starting it, calls
// fn with its ID and removes it.
func withContainer(ctx context.Context, cli *client.Client, image string, fn func(id string) error) error {
	c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image:           image,
			Entrypoint:      []string{AgentBinary},
			Labels:          map[string]string{"choir.inspect": "true"},
			NetworkDisabled: true,
		},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("image %s is not in the local engine: build it with `choirctl agent build`: %w", image, err)
	}
	if err != nil {
		return fmt.Errorf("read image %s: %w", image, err)
	}
	defer cli.ContainerRemove(context.WithoutCancel(ctx), c.ID, client.ContainerRemoveOptions{Force: true})
	return fn(c.ID)
}

func readVersion(ctx context.Context, cli *client.Client, containerID string) (admin.BuildVersion, error) {
	res, err := cli.CopyFromContainer(ctx, containerID, client.CopyFromContainerOptions{SourcePath: VersionFile})
	if err != nil {
		return admin.BuildVersion{}, fmt.Errorf("read %s: %w", VersionFile, err)
	}
	defer res.Content.Close()
	tr := tar.NewReader(res.Content)
	if _, err := tr.Next(); err != nil {
		return admin.BuildVersion{}, fmt.Errorf("read %s: %w", VersionFile, err)
	}
	var v admin.BuildVersion
	data, err := io.ReadAll(io.LimitReader(tr, 1<<20))
	if err != nil {
		return admin.BuildVersion{}, fmt.Errorf("read %s: %w", VersionFile, err)
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return admin.BuildVersion{}, fmt.Errorf("parse %s: %w", VersionFile, err)
	}
	return v, nil
}

// ReadVersion reads /choir/version.json from an image.
func ReadVersion(ctx context.Context, cli *client.Client, image string) (admin.BuildVersion, error) {
	var v admin.BuildVersion
	err := withContainer(ctx, cli, image, func(id string) error {
		var err error
		v, err = readVersion(ctx, cli, id)
		return err
	})
	return v, err
}

// Expect is what choird expects of an agent's image when it starts it.
// Empty fields are not checked.
type Expect struct {
	AgentID          string
	ImageVersion     string
	GlobalRepoCommit string
	AgentRepoCommit  string
}

// ErrVersionMismatch reports an image whose version.json is not what
// choird expects (silent drift, spec 15.1).
var ErrVersionMismatch = errors.New("agent image version mismatch")

// VerifyImage reads /choir/version.json from image and checks it against
// want and against the image's own choir.version label. choird calls it
// before starting a container.
func VerifyImage(ctx context.Context, cli *client.Client, image string, want Expect) (admin.BuildVersion, error) {
	v, err := ReadVersion(ctx, cli, image)
	if err != nil {
		return admin.BuildVersion{}, fmt.Errorf("verify image %s: %w", image, err)
	}
	var problems []string
	check := func(field, got, want string) {
		if want != "" && got != want {
			problems = append(problems, fmt.Sprintf("%s is %q, want %q", field, got, want))
		}
	}
	check("agent_id", v.AgentID, want.AgentID)
	check("image_version", v.ImageVersion, want.ImageVersion)
	check("global_repo_commit", v.GlobalRepoCommit, want.GlobalRepoCommit)
	check("agent_repo_commit", v.AgentRepoCommit, want.AgentRepoCommit)
	if v.ImageVersion != computeImageVersion(v) {
		problems = append(problems, "image_version does not match the file's contents")
	}
	if img, err := cli.ImageInspect(ctx, image); err == nil && img.Config != nil {
		var label admin.BuildVersion
		if json.Unmarshal([]byte(img.Config.Labels[LabelVersion]), &label) != nil || label != v {
			problems = append(problems, "the image's choir.version label differs from its version.json")
		}
	}
	if len(problems) > 0 {
		id := want.AgentID
		if id == "" {
			id = v.AgentID
		}
		return v, fmt.Errorf("verify image %s: %w: %s; rebuild it with `choirctl agent build %s`", image, ErrVersionMismatch, strings.Join(problems, "; "), id)
	}
	return v, nil
}

// BaseImage is the base image built from Dockerfile.base at a global
// commit on an OS image (name and ID; empty when none is configured):
// choir-base:<12 hex digits of their hash>.
func BaseImage(globalCommit, osImage, osImageID string) string {
	return BaseRepository + ":" + hashStrings(formatVersion, globalCommit, osImage, osImageID)[:12]
}

func hashStrings(parts ...string) string {
	return strings.TrimPrefix(hashOf(strings.Join(parts, "\x00")), "sha256:")
}
