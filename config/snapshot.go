package config

import (
	"bytes"
	"fmt"
	"path/filepath"
)

// snapshotTries bounds how often LoadSnapshot reads the files again while
// they keep changing.
const snapshotTries = 5

// LoadSnapshot is [Load] over one consistent snapshot of config.json and
// secrets.json (spec 17.7): it reads both files, then both again, until two
// reads in a row agree, so a file replaced between the two reads is never
// mixed with the other's older or newer content. It returns the
// config.json bytes it validated, and fails, naming the file, when they
// keep changing.
func LoadSnapshot(dir string) (*Config, Secrets, []byte, error) {
	configData, secretsData, _, err := readFiles(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	for range snapshotTries {
		c2, s2, _, err := readFiles(dir)
		if err != nil {
			return nil, nil, nil, err
		}
		cSame, sSame := bytes.Equal(configData, c2), bytes.Equal(secretsData, s2)
		if cSame && sSame {
			cfg, secrets, err := parseFiles(dir, configData, secretsData)
			if err != nil {
				return nil, nil, nil, err
			}
			return cfg, secrets, configData, nil
		}
		configData, secretsData = c2, s2
	}
	return nil, nil, nil, fmt.Errorf("%s and %s kept changing while they were read; run the command again once they are saved",
		filepath.Join(dir, ConfigFile), filepath.Join(dir, SecretsFile))
}
