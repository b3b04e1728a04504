{
  "architectures": ["LlamaForCausalLM"],
  "hidden_size": 4096
}
