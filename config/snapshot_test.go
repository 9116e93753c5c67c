package config_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/choirhq/choir/config"
)

func TestLoadSnapshot(t *testing.T) {
	t.Parallel()
	spec, err := os.ReadFile("testdata/spec-example.json")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("ReturnsTheBytesItValidated", func(t *testing.T) {
		t.Parallel()
		dir := writeDir(t, string(spec), specSecretsJSON(t), 0o600)
		c, s, data, err := config.LoadSnapshot(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, spec) || !reflect.DeepEqual(c, specConfig(t)) || !reflect.DeepEqual(s, specSecrets()) {
			t.Errorf("LoadSnapshot = %+v, %v, %d bytes", c, s, len(data))
		}
	})

	t.Run("FilesReplacedWhileReadAreNeverMixed", func(t *testing.T) {
		t.Parallel()
		dir := writeDir(t, string(spec), specSecretsJSON(t), 0o600)
		variants := [][]byte{spec, append(bytes.Clone(spec), '\n', '\n')}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := config.WriteFileAtomic(filepath.Join(dir, config.ConfigFile), variants[i%2], 0o644); err != nil {
					t.Error(err)
					return
				}
			}
		})
		for range 20 {
			c, _, data, err := config.LoadSnapshot(dir)
			if err != nil {
				if !strings.Contains(err.Error(), "kept changing") {
					t.Errorf("LoadSnapshot: %v", err)
				}
				continue
			}
			if (!bytes.Equal(data, variants[0]) && !bytes.Equal(data, variants[1])) || !reflect.DeepEqual(c, specConfig(t)) {
				t.Errorf("LoadSnapshot returned a mix: %d bytes", len(data))
			}
		}
		close(stop)
		wg.Wait()
	})
}
