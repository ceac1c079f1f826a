"""Models: the definitions of the models the lessons run (mlp, classifier, tiny_decoder) and the course's
trained model (weights/: target and draft, tokenizer, validation text, corpus manifest, model card): llama
(the architecture, with its KV cache), corpus (the standard library as training text), tokenizer (byte-level
BPE), perplexity, train (`python -m hwopt.models.train`), checkpoint (weights in Hugging Face's layout),
onnx_export and gguf_export (the ecosystem's formats)."""
