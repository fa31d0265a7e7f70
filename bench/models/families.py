#!/usr/bin/env python3
"""Many model families through `torch.compile(model, backend="kiln")`, each against eager.

Where bench/models/census.py exports models and runs the archives through `host`, this goes the
way a `torch.compile` user does: dynamo captures each model (graph breaks and all), the kiln
backend compiles every graph, and the outputs are compared with eager's. Tiny configs with
random weights (a few layers, 64 wide), so a family costs seconds on two cores. A family is
OK when every graph compiled (no warning that one runs in eager) and every floating-point
output is within 1e-3 of eager's, relative to its largest value; BAD lists the warnings, ERR
the exception (a config the model itself refuses shows here too).

    PYTHONPATH=python KILN_HOST=target/release/host python3 bench/models/families.py \\
        [--only NAME ...] [--device cpu|cuda]

Needs PyTorch, transformers and torchvision (target/torch-python has them).
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch

H = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_hidden_layers=2)
KV = dict(H, num_key_value_heads=2)
SEQ2SEQ = dict(d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_layers=2, decoder_layers=2, vocab_size=256)
T5 = dict(d_model=64, d_ff=128, num_heads=4, d_kv=16, num_layers=2, vocab_size=256)
AUDIO = dict(H, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
             num_conv_pos_embedding_groups=4)
STAGES = dict(hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1])


def ids(seq=12):
    return torch.randint(3, 256, (2, seq))


def images(size=64, batch=2):
    return torch.randn(batch, 3, size, size)


def families():
    """name: (a function building the model, a function building its inputs: a dict of keyword
    inputs or a tuple of positional ones)."""
    import torchvision.models as tv
    import torchvision.models.segmentation as seg
    import torchvision.models.video as vid
    import transformers as T

    text = lambda: dict(input_ids=ids())  # noqa: E731
    pair = lambda: dict(input_ids=ids(), decoder_input_ids=ids(5))  # noqa: E731
    px = lambda size=64, batch=2: (lambda: (images(size, batch),))  # noqa: E731
    hf = lambda cls, config, **kw: (lambda: cls(config(**kw)))  # noqa: E731
    out = {
        "distilbert": (hf(T.DistilBertModel, T.DistilBertConfig, dim=64, hidden_dim=128, n_layers=2, n_heads=4,
                          vocab_size=256), text),
        "roberta": (hf(T.RobertaModel, T.RobertaConfig, vocab_size=256, **H), text),
        "albert": (hf(T.AlbertModel, T.AlbertConfig, embedding_size=32, vocab_size=256, **H), text),
        "deberta_v2": (hf(T.DebertaV2Model, T.DebertaV2Config, vocab_size=256, **H), text),
        "convbert": (hf(T.ConvBertModel, T.ConvBertConfig, vocab_size=256, embedding_size=64, **H), text),
        "xlnet": (hf(T.XLNetModel, T.XLNetConfig, d_model=64, d_inner=128, n_head=4, n_layer=2, vocab_size=256),
                  text),
        "gpt_neox": (hf(T.GPTNeoXForCausalLM, T.GPTNeoXConfig, vocab_size=256, **H), text),
        "opt": (hf(T.OPTForCausalLM, T.OPTConfig, hidden_size=64, ffn_dim=128, num_attention_heads=4,
                   num_hidden_layers=2, vocab_size=256, word_embed_proj_dim=64), text),
        "bloom": (hf(T.BloomForCausalLM, T.BloomConfig, hidden_size=64, n_head=4, n_layer=2, vocab_size=256), text),
        "falcon": (hf(T.FalconForCausalLM, T.FalconConfig, hidden_size=64, num_attention_heads=4,
                      num_hidden_layers=2, vocab_size=256), text),
        "gptj": (hf(T.GPTJForCausalLM, T.GPTJConfig, n_embd=64, n_head=4, n_layer=2, vocab_size=256, rotary_dim=8),
                 text),
        "mistral": (hf(T.MistralForCausalLM, T.MistralConfig, vocab_size=256, **KV), text),
        "qwen3": (hf(T.Qwen3ForCausalLM, T.Qwen3Config, vocab_size=256, head_dim=16, **KV), text),
        "phi3": (hf(T.Phi3ForCausalLM, T.Phi3Config, vocab_size=256, pad_token_id=0, **KV), text),
        "gemma2": (hf(T.Gemma2ForCausalLM, T.Gemma2Config, vocab_size=256, head_dim=16, **KV), text),
        "gpt_bigcode": (hf(T.GPTBigCodeForCausalLM, T.GPTBigCodeConfig, n_embd=64, n_head=4, n_layer=2,
                           vocab_size=256, multi_query=True), text),
        "mamba": (hf(T.MambaForCausalLM, T.MambaConfig, vocab_size=256, hidden_size=64, state_size=8,
                     num_hidden_layers=2), text),
        "rwkv": (hf(T.RwkvForCausalLM, T.RwkvConfig, vocab_size=256, hidden_size=64, num_hidden_layers=2,
                    context_length=16, attention_hidden_size=64, intermediate_size=128), text),
        "bart": (hf(T.BartModel, T.BartConfig, **SEQ2SEQ), pair),
        "t5": (hf(T.T5Model, T.T5Config, **T5), pair),
        "longt5": (hf(T.LongT5Model, T.LongT5Config, local_radius=4, **T5), pair),
        "whisper": (hf(T.WhisperModel, T.WhisperConfig, num_mel_bins=16, max_source_positions=32, pad_token_id=0,
                       bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, **SEQ2SEQ),
                    lambda: dict(input_features=torch.randn(2, 16, 64), decoder_input_ids=ids(5))),
        "wav2vec2": (hf(T.Wav2Vec2Model, T.Wav2Vec2Config, **AUDIO), lambda: (torch.randn(2, 1600),)),
        "clip": (hf(T.CLIPModel, T.CLIPConfig, text_config=dict(vocab_size=256, max_position_embeddings=32, **H),
                    vision_config=dict(image_size=64, patch_size=8, **H)),
                 lambda: dict(input_ids=ids(), pixel_values=images())),
        "beit": (hf(T.BeitModel, T.BeitConfig, image_size=64, patch_size=8, use_relative_position_bias=True, **H),
                 px()),
        "swinv2": (hf(T.Swinv2Model, T.Swinv2Config, image_size=64, embed_dim=16, depths=[1, 1], num_heads=[2, 4],
                      window_size=4), px()),
        "convnextv2": (hf(T.ConvNextV2Model, T.ConvNextV2Config, **STAGES), px()),
        "segformer": (hf(T.SegformerModel, T.SegformerConfig, num_attention_heads=[1, 2, 2, 4], **STAGES), px()),
        "efficientnet": (hf(T.EfficientNetModel, T.EfficientNetConfig, image_size=64), px()),
        "sam_vision": (hf(T.SamVisionModel, T.SamVisionConfig, image_size=64, patch_size=8, hidden_size=64,
                          num_hidden_layers=2, num_attention_heads=4, mlp_dim=128, output_channels=32,
                          window_size=4, global_attn_indexes=[1]), px(64, 1)),
        "detr": (hf(T.DetrModel, T.DetrConfig, use_timm_backbone=False, use_pretrained_backbone=False,
                    backbone_config=T.ResNetConfig(embedding_size=16, out_features=["stage4"], **STAGES),
                    d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                    decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_queries=10),
                 lambda: dict(pixel_values=images(64, 1))),
        "timesformer": (hf(T.TimesformerModel, T.TimesformerConfig, image_size=32, patch_size=8, num_frames=4, **H),
                        lambda: (torch.randn(1, 4, 3, 32, 32),)),
        "mixtral": (hf(T.MixtralForCausalLM, T.MixtralConfig, vocab_size=256, num_local_experts=4,
                       num_experts_per_tok=2, **KV), text),
    }
    # Mixtures of experts: routers, shared experts, biased and transposed expert weights.
    moe = dict(vocab_size=256, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, **KV)
    out.update({
        "qwen2_moe": (hf(T.Qwen2MoeForCausalLM, T.Qwen2MoeConfig, shared_expert_intermediate_size=48, **moe), text),
        "qwen3_moe": (hf(T.Qwen3MoeForCausalLM, T.Qwen3MoeConfig, **moe), text),
        "olmoe": (hf(T.OlmoeForCausalLM, T.OlmoeConfig, vocab_size=256, num_experts=4, num_experts_per_tok=2,
                     **KV), text),
        "gpt_oss": (hf(T.GptOssForCausalLM, T.GptOssConfig, vocab_size=256, num_local_experts=4,
                       num_experts_per_tok=2, head_dim=16, layer_types=["sliding_attention", "full_attention"],
                       sliding_window=8, **KV), text),
        "deepseek_v3": (hf(T.DeepseekV3ForCausalLM, T.DeepseekV3Config, vocab_size=256, n_routed_experts=8,
                           num_experts_per_tok=2, n_group=2, topk_group=1, moe_intermediate_size=32,
                           first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16,
                           qk_rope_head_dim=8, v_head_dim=16, **H), text),
        "granitemoe": (hf(T.GraniteMoeForCausalLM, T.GraniteMoeConfig, vocab_size=256, num_local_experts=4,
                          num_experts_per_tok=2, **KV), text),
        "phimoe": (hf(T.PhimoeForCausalLM, T.PhimoeConfig, vocab_size=256, num_local_experts=4,
                      num_experts_per_tok=2, **KV), text),
    })
    for name in ("densenet121", "shufflenet_v2_x0_5", "efficientnet_b0", "regnet_y_400mf", "convnext_tiny",
                 "mobilenet_v3_small", "resnext50_32x4d"):
        out[f"tv_{name}"] = ((lambda n=name: getattr(tv, n)(num_classes=10)), px())
    for name in ("swin_t", "maxvit_t", "vit_b_16"):
        out[f"tv_{name}"] = ((lambda n=name: getattr(tv, n)(num_classes=10)), px(224, 1))
    out["tv_deeplabv3"] = ((lambda: seg.deeplabv3_mobilenet_v3_large(num_classes=5, aux_loss=False, weights_backbone=None)), px())
    out["tv_r3d"] = ((lambda: vid.r3d_18(num_classes=5)), lambda: (torch.randn(1, 3, 4, 32, 32),))
    out["tv_mvit"] = ((lambda: vid.mvit_v2_s(num_classes=5)), lambda: (torch.randn(1, 3, 16, 224, 224),))
    return out


def flat(o) -> list:
    """The tensors of a model's output (a tensor, a ModelOutput, nested tuples and dicts)."""
    if isinstance(o, torch.Tensor):
        return [o]
    if hasattr(o, "to_tuple"):
        o = o.to_tuple()
    if isinstance(o, (tuple, list)):
        return [t for x in o for t in flat(x)]
    if isinstance(o, dict):
        return [t for x in o.values() for t in flat(x)]
    return []


def check(make, inputs, device: str) -> tuple[str, str]:
    torch.manual_seed(0)
    model = make().eval().to(device)
    args = inputs()
    args = {k: v.to(device) for k, v in args.items()} if isinstance(args, dict) else [a.to(device) for a in args]
    call = (lambda m: m(**args)) if isinstance(args, dict) else (lambda m: m(*args))
    torch._dynamo.reset()
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        want = flat(call(model))
        got = flat(call(torch.compile(model, backend="kiln")))
    eager = [str(w.message).replace("\n", " ")[:300] for w in caught if "Kiln cannot compile" in str(w.message)]
    errors = [((g.float() - w.float()).abs().max() / (w.float().abs().max() + 1e-6)).item()
              for g, w in zip(got, want) if w.is_floating_point()]
    error = max(errors, default=0.0)
    ok = len(got) == len(want) and error <= 1e-3 and not eager
    zero = all(not w.is_floating_point() or not w.any() for w in want)
    detail = f"error {error:.1e}" + (" (eager's outputs are all zero: the comparison shows little)" if zero else "")
    return ("OK" if ok else "BAD"), detail + "".join(f"\n    eager: {e}" for e in eager[:3])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", help="these families alone")
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    counts = {"OK": 0, "BAD": 0, "ERR": 0}
    for name, (make, inputs) in families().items():
        if a.only and name not in a.only:
            continue
        start = time.time()
        try:
            status, detail = check(make, inputs, a.device)
        except Exception as error:  # noqa: BLE001 (a family's failure is its line of the report)
            status, detail = "ERR", f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
        counts[status] += 1
        print(f"{status} {name} ({time.time() - start:.0f} s): {detail}", flush=True)
    print(f"# {counts['OK']} OK, {counts['BAD']} BAD, {counts['ERR']} ERR on {a.device}")


if __name__ == "__main__":
    main()
