package memory

import (
	"context"
	"fmt"
	"time"
)

// Embed embeds texts with the memory pipeline's embedder, for indexes that
// are searched the way memory is (daemon/toolsearch). It returns the
// vectors and the embedder's model name, to be stored with them; without
// an embedder it returns no vectors and no error, and the caller searches
// full text alone.
func (s *Store) Embed(ctx context.Context, texts []string) (vecs [][]float32, model string, err error) {
	if s.embedder == nil || len(texts) == 0 {
		return nil, "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, max(s.queryEmbedTimeout, 10*time.Second))
	defer cancel()
	vecs, err = s.embedder.Embed(ctx, texts)
	if err != nil {
		return nil, "", fmt.Errorf("embed %d texts: %w", len(texts), err)
	}
	return vecs, s.embedder.Model(), nil
}
