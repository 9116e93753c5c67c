package config

import (
	"os"
	"path/filepath"
)

// DefaultHome is the .choir.d directory used when no --home flag is given:
// $CHOIR_HOME if set, else ~/.choir.d.
func DefaultHome() string {
	if h := os.Getenv("CHOIR_HOME"); h != "" {
		return h
	}
	if d, err := os.UserHomeDir(); err == nil {
		return filepath.Join(d, ".choir.d")
	}
	return ".choir.d"
}
