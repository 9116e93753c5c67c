package adminapi

import (
	"context"

	"github.com/choirhq/choir/rpc/admin"
)

func (d *API) mountChat(mux *admin.Mux) {
	admin.Handle(mux, "POST", admin.PathChatSend, func(ctx context.Context, in admin.ChatSendRequest) (admin.ChatSent, error) {
		out, err := d.chat.ChatSend(ctx, adminScope(ctx), admin.PathValue(ctx, "id"), in)
		return out, controlErr(err)
	})
	admin.Handle(mux, "POST", admin.PathChatPoll, func(ctx context.Context, in admin.ChatPollRequest) ([]admin.ChatMessage, error) {
		out, err := d.chat.ChatPoll(ctx, adminScope(ctx), admin.PathValue(ctx, "id"), in)
		return out, controlErr(err)
	})
}
