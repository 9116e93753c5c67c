package lane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"github.com/choirhq/choir/rpc"
)

// Notify tells the user something that no committed event of the lane
// says (a usage cap notice). Its message ID is derived from the log's head
// and the text, so that the same notice is never queued twice at the same
// point of the log.
func (e *Edge) Notify(ctx context.Context, kind, text string) error {
	rev, h := e.cfg.Log.Head()
	sum := sha256.Sum256([]byte(text))
	return e.send(ctx, kind+"-"+hex.EncodeToString(sum[:6]), rpc.Event{Rev: rev, Hash: h}, text)
}
