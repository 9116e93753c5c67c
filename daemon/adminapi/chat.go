package adminapi

import (
	"context"

	"github.com/choirhq/choir/daemon/inbox"
	"github.com/choirhq/choir/rpc/admin"
)

// Admin API paths of choirctl chat.
const (
	PathChatSend = "/v1/agents/{id}/chat/send"
	PathChatPoll = "/v1/agents/{id}/chat/poll"
)

func (d *API) mountChat(mux *admin.Mux) {
	admin.Handle(mux, "POST", PathChatSend, func(ctx context.Context, in inbox.ChatSendRequest) (inbox.ChatSent, error) {
		out, err := d.chat.ChatSend(ctx, adminScope(ctx), admin.PathValue(ctx, "id"), in)
		return out, controlErr(err)
	})
	admin.Handle(mux, "POST", PathChatPoll, func(ctx context.Context, in inbox.ChatPollRequest) ([]inbox.ChatMessage, error) {
		out, err := d.chat.ChatPoll(ctx, adminScope(ctx), admin.PathValue(ctx, "id"), in)
		return out, controlErr(err)
	})
}
