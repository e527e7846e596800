"""The OpenAI-compatible API: `specchat serve`, and the same routes beside the chat app in `specchat ui`. No Gradio."""
