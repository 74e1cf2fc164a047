"""/v1/responses: router, serving object (on the chat one), wire shapes, translation to chat, event stream."""
