"""Wire formats ⇄ the gateway's conversation, one module per format, pure functions only.

Each is used in both directions: a provider adapter writes its requests and reads its answers
with it, and the door that speaks the same format reads requests and writes answers with it. So a
conversation that comes in through the Anthropic door and goes out to OpenAI is read by
`anthropic` and written by `openai`, and the round trip through each format is property-tested.
"""
