package daemon

import (
	"context"

	"github.com/choirhq/choir/rpc/admin"
)

func (d *Daemon) mountChat(mux *admin.Mux) {
	admin.Handle(mux, "POST", admin.PathChatSend, func(ctx context.Context, in ChatSendRequest) (ChatSent, error) {
		out, err := d.ChatSend(ctx, adminScope(ctx), admin.PathValue(ctx, "id"), in)
		return out, controlErr(err)
	})
	admin.Handle(mux, "POST", admin.PathChatPoll, func(ctx context.Context, in ChatPollRequest) ([]ChatMessage, error) {
		out, err := d.ChatPoll(ctx, adminScope(ctx), admin.PathValue(ctx, "id"), in)
		return out, controlErr(err)
	})
}
