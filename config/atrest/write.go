package atrest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data, mode perm, through a temporary file
// in the same directory: created with mode 0600 (then set to perm
// exactly, whatever the umask), written, synced and renamed into place,
// and the directory synced, so a crash leaves the old file or the new one,
// never a partial one, and the old file's inode is let go whole. Without
// overwrite it links rather than renames, and refuses, with an error
// wrapping fs.ErrExist, when path exists.
func WriteFile(path string, data []byte, perm fs.FileMode, overwrite bool) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if rmErr := os.Remove(tmp.Name()); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) && err == nil {
			err = fmt.Errorf("remove temporary file: %w", rmErr)
		}
	}()
	if err := writeSynced(tmp, data, perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if overwrite {
		err = os.Rename(tmp.Name(), path)
	} else {
		err = os.Link(tmp.Name(), path)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("refuse to overwrite %s: %w", path, fs.ErrExist)
		}
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDir(dir)
}

// writeSynced sets f's mode, writes data, syncs and closes f.
func writeSynced(f *os.File, data []byte, perm fs.FileMode) error {
	err := f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncDir makes a rename or link in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// ReplaceScrubbing replaces the plaintext file at path with data, as
// WriteFile does, then overwrites the old file's content with zeros
// through a descriptor opened before the rename, and syncs it. Zeroing is
// best effort (a copy-on-write file system, an SSD's remapping or a
// snapshot may keep the old blocks); the rename is what counts: path never
// holds a partial file, and a crash at any point leaves the old file or
// the new one.
func ReplaceScrubbing(path string, data []byte, perm fs.FileMode) error {
	old, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer old.Close()
	info, err := old.Stat()
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	if err := WriteFile(path, data, perm, true); err != nil {
		return err
	}
	if _, err := old.WriteAt(make([]byte, info.Size()), 0); err != nil {
		return fmt.Errorf("overwrite the old %s: %w", path, err)
	}
	if err := old.Sync(); err != nil {
		return fmt.Errorf("overwrite the old %s: %w", path, err)
	}
	return nil
}
