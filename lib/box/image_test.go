package box

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/errdefs"
)

// A box from an OCI archive: imported, unpacked, run with the image's own
// command but never its user; then the same image by name from the store.
func TestImageArchive(t *testing.T) {
	r := runner(t)
	archive, manifest := ociArchive(t, harness.Rootfs, []string{"/usr/local/bin/probe", "uid", "write=/x", "read=/etc/hosts"})

	s := spec(t, RunC)
	s.Rootfs, s.Archive = "", archive
	ctx, cancel := context.WithTimeout(r.ctx(context.Background()), 30*time.Second)
	defer cancel()
	b, err := r.Start(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	snapshots := r.client.SnapshotService(snapshotter)
	if _, err := snapshots.Stat(ctx, s.ID); err != nil {
		t.Errorf("snapshot %s before Delete: %v", s.ID, err)
	}
	expect(t, deleted(t, s), map[string]string{
		"uid ":            "ok 65534:65534",
		"write /x":        "error: open /x: read-only file system",
		"read /etc/hosts": "ok",
	})
	if _, err := snapshots.Stat(ctx, s.ID); !errdefs.IsNotFound(err) {
		t.Errorf("snapshot %s after Delete: %v, want not found", s.ID, err)
	}

	s = spec(t, RunC, "/usr/local/bin/probe", "status=CapEff")
	s.Rootfs, s.Image = "", "impyard-import@"+manifest
	_, log := run(t, r, s)
	expect(t, log, map[string]string{"status CapEff": "ok 0000000000000000"})
}

// ociArchive writes an OCI image layout tar of one layer holding dir, whose
// config runs cmd as root (which a box must ignore). It returns the path
// and the manifest digest.
func ociArchive(t *testing.T, dir string, cmd []string) (string, string) {
	t.Helper()
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link, _ := os.Readlink(path)
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name, _ = filepath.Rel(dir, path)
		if err := lw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(lw, f)
			return err
		}
		return nil
	})
	if err != nil || lw.Close() != nil {
		t.Fatal(err)
	}
	blobs := map[string][]byte{}
	blob := func(mediaType string, b []byte) map[string]any {
		d := fmt.Sprintf("sha256:%x", sha256.Sum256(b))
		blobs[d] = b
		return map[string]any{"mediaType": mediaType, "digest": d, "size": len(b)}
	}
	js := func(v any) []byte {
		b, _ := json.Marshal(v)
		return b
	}
	layerDesc := blob("application/vnd.oci.image.layer.v1.tar", layer.Bytes())
	config := blob("application/vnd.oci.image.config.v1+json", js(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       map[string]any{"User": "0:0", "Env": []string{"PATH=/usr/local/bin:/bin"}, "Cmd": cmd},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc["digest"].(string)}},
	}))
	manifest := blob("application/vnd.oci.image.manifest.v1+json", js(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        config,
		"layers":        []any{layerDesc},
	}))
	manifest["platform"] = map[string]string{"architecture": "amd64", "os": "linux"}
	files := map[string][]byte{
		"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json": js(map[string]any{"schemaVersion": 2, "manifests": []any{manifest}}),
	}
	for d, b := range blobs {
		files["blobs/sha256/"+d[len("sha256:"):]] = b
	}
	path := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := tar.NewWriter(f)
	w.WriteHeader(&tar.Header{Name: "blobs/", Typeflag: tar.TypeDir, Mode: 0o755})
	w.WriteHeader(&tar.Header{Name: "blobs/sha256/", Typeflag: tar.TypeDir, Mode: 0o755})
	for name, b := range files {
		if err := w.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		w.Write(b)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path, manifest["digest"].(string)
}
