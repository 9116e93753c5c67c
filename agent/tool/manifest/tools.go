package manifest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/strictjson"
)

// maxManifestBytes bounds a manifest file.
const maxManifestBytes = 1 << 20

// LoadTools loads the external tools' manifests of one directory, in name
// order, as tools of origin, each bound by bind to what runs it (package
// external's executor in the agent; nil binds none, for a registry that is
// only checked). A missing directory, or an empty dir, holds no tools.
// Every invalid manifest is reported, as a [*tool.ManifestError] naming
// its file, in the joined error; the valid ones are returned all the same.
func LoadTools(dir string, origin tool.Origin, bind func(tool.Spec) tool.Tool) ([]*tool.Def, error) {
	if dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tool directory %s: %w", dir, err)
	}
	var defs []*tool.Def
	var errs []error
	byName := map[string]string{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") || e.IsDir() {
			continue
		}
		file := filepath.Join(dir, name)
		d, err := loadManifest(file, origin, bind)
		if err != nil {
			errs = append(errs, &tool.ManifestError{File: file, Err: err})
			continue
		}
		if prev, dup := byName[d.Name()]; dup {
			errs = append(errs, &tool.ManifestError{File: file, Err: fmt.Errorf("tool %q is already defined by %s in the same directory", d.Name(), prev)})
			continue
		}
		byName[d.Name()] = file
		defs = append(defs, d)
	}
	return defs, errors.Join(errs...)
}

// loadManifest parses, validates and binds one manifest to its executable.
func loadManifest(file string, origin tool.Origin, bind func(tool.Spec) tool.Tool) (*tool.Def, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	var spec tool.Spec
	if err := strictjson.Decode(data, &spec, strictjson.Limits{MaxBytes: maxManifestBytes}); err != nil {
		return nil, fmt.Errorf("invalid manifest: %w", manifestHint(err))
	}
	if spec.Runtime.Host {
		return nil, errors.New("runtime.host: external tools run in the agent; host tools are built into choird")
	}
	if spec.Runtime.Meta {
		return nil, errors.New("runtime.meta: reserved for the built-in proposal tools")
	}
	exe, err := executablePath(file, spec.Runtime.ExecPath)
	if err != nil {
		return nil, err
	}
	spec.Runtime.ExecPath = exe
	var run tool.Tool
	if bind != nil {
		run = bind(spec)
	}
	d, err := tool.NewDef(spec, run, origin, file)
	if spec.Runtime.Trust == "" {
		return nil, errors.Join(err, errors.New(`runtime.trust: required: "own" when the tool's results are the agent's own data, `+
			`"untrusted" when they carry text from outside (a web page, a mail, another service's answer)`))
	}
	return d, err
}

// manifestHint adds a pointer for the one mistake the spec's own example
// invites: calling the schema input_schema.
func manifestHint(err error) error {
	if strings.Contains(err.Error(), "$.llm.input_schema: unknown field") {
		return fmt.Errorf("%w (the input schema goes in llm.parameters)", err)
	}
	return err
}

// executablePath finds and checks a manifest's executable.
func executablePath(manifest, execPath string) (string, error) {
	dir := filepath.Dir(manifest)
	p := execPath
	switch {
	case p == "":
		p = filepath.Join(dir, strings.TrimSuffix(filepath.Base(manifest), ".json"))
	case !filepath.IsAbs(p):
		p = filepath.Join(dir, p)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("executable %s: %w", p, err)
	}
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("executable %s: missing (set runtime.exec_path or put the executable next to the manifest)", abs)
	case err != nil:
		return "", fmt.Errorf("executable %s: %w", abs, err)
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("executable %s: not a regular file", abs)
	case fi.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("executable %s: not executable (chmod +x it)", abs)
	}
	return abs, nil
}
