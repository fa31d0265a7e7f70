#!/usr/bin/env python3
"""A census of whole models exported the way a user exports them, and what Kiln makes of them.

The model zoo (tools/model_zoo.py) wraps each model so that it takes tensors and returns a
tuple. A user does not: they call `torch.export.export(model, (), kwargs)` on the model as
`transformers` or `torchvision` builds it, with its default outputs (ModelOutput objects,
caches) and keyword inputs. This script does exactly that for many families, the ones the
issues name and others, then asks Kiln to import, compile and run each archive.

Usage (on a machine with PyTorch, transformers and torchvision; the GPU is optional):
    python3 bench/models/census.py export OUT [--only NAME ...] [--jobs N]
    python3 bench/models/census.py check OUT --host PATH/TO/host [--devices cpu cuda] [--jobs N]

`export` writes OUT/NAME/{model.pt2, model_core.pt2, NAME.bin per input, expectedN.bin,
meta.json}; a model that torch.export itself refuses is recorded in meta.json and skipped.
`check` then, for each archive and form: `host compile --device D` for every device named
(import and code generation), `host run` on cpu against the stored outputs, and, where a
CUDA GPU is present, the generated output_code.py against the same outputs. It prints a
table and a summary line per column.
"""
import argparse
import concurrent.futures as cf
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path


# --- the models ------------------------------------------------------------------------

def text_inputs(torch, vocab, batch=2, seq=12, mask=True, types=False):
    gen = torch.Generator().manual_seed(0)
    kw = {"input_ids": torch.randint(0, vocab, (batch, seq), generator=gen)}
    if mask:
        m = torch.ones(batch, seq, dtype=torch.int64)
        m[1:, seq - seq // 4:] = 0
        kw["attention_mask"] = m
    if types:
        kw["token_type_ids"] = torch.zeros(batch, seq, dtype=torch.int64)
    return kw


def image_inputs(torch, size=32, channels=3, batch=2, key="pixel_values"):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, channels, size, size, generator=gen)
    return {key: x} if key else (x,)


def hf(cls_name, cfg_name, inputs, **cfg):
    def build(torch):
        import transformers
        config = getattr(transformers, cfg_name)(**cfg)
        model = getattr(transformers, cls_name)(config)
        return model, inputs(torch, config)
    return build


def tv(fn, size=64, **kw):
    def build(torch):
        import torchvision
        model = getattr(torchvision.models, fn)(weights=None, **kw)
        return model, image_inputs(torch, size=size, key=None)
    return build


SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
DECODER = dict(SMALL, vocab_size=96, max_position_embeddings=64)
TEXT = lambda torch, c: text_inputs(torch, c.vocab_size)
TEXT_T = lambda torch, c: text_inputs(torch, c.vocab_size, types=True)
IDS = lambda torch, c: text_inputs(torch, c.vocab_size, mask=False)
SEQ2SEQ = lambda torch, c: dict(text_inputs(torch, c.vocab_size),
                                decoder_input_ids=text_inputs(torch, c.vocab_size, seq=7,
                                                              mask=False)["input_ids"])
IMAGE = lambda size: (lambda torch, c: image_inputs(torch, size=size))

MODELS = {
    # The families issue 11 names.
    "gpt2_lm": hf("GPT2LMHeadModel", "GPT2Config", TEXT, n_layer=2, n_embd=32, n_head=4,
                  vocab_size=96, n_positions=64),
    "gpt2": hf("GPT2Model", "GPT2Config", IDS, n_layer=2, n_embd=32, n_head=4, vocab_size=96,
               n_positions=64),
    "bert": hf("BertModel", "BertConfig", TEXT_T, **DECODER),
    "bert_mlm": hf("BertForMaskedLM", "BertConfig", TEXT, **DECODER),
    "bert_cls": hf("BertForSequenceClassification", "BertConfig", TEXT, **DECODER),
    "llama_lm": hf("LlamaForCausalLM", "LlamaConfig", TEXT, num_key_value_heads=2, **DECODER),
    "llama": hf("LlamaModel", "LlamaConfig", IDS, **DECODER),
    "t5_encoder": hf("T5EncoderModel", "T5Config", TEXT, d_model=32, d_kv=8, d_ff=64,
                     num_layers=2, num_heads=4, vocab_size=96),
    "t5": hf("T5ForConditionalGeneration", "T5Config", SEQ2SEQ, d_model=32, d_kv=8, d_ff=64,
             num_layers=2, num_heads=4, vocab_size=96, decoder_start_token_id=0),
    "vit": hf("ViTForImageClassification", "ViTConfig", IMAGE(32), image_size=32,
              patch_size=8, num_labels=10, **SMALL),
    "vit_model": hf("ViTModel", "ViTConfig", IMAGE(32), image_size=32, patch_size=8, **SMALL),
    "tv_resnet18": tv("resnet18"),
    "tv_resnet50": tv("resnet50"),
    "tv_mobilenet_v2": tv("mobilenet_v2"),
    "tv_mobilenet_v3_small": tv("mobilenet_v3_small"),
    # Families no issue names.
    "distilbert": hf("DistilBertModel", "DistilBertConfig", TEXT, dim=32, n_layers=2, n_heads=4,
                     hidden_dim=64, vocab_size=96, max_position_embeddings=64),
    "roberta": hf("RobertaModel", "RobertaConfig", TEXT, **DECODER),
    "albert": hf("AlbertModel", "AlbertConfig", TEXT, embedding_size=16, **DECODER),
    "electra": hf("ElectraModel", "ElectraConfig", TEXT, embedding_size=16, **DECODER),
    "deberta_v2": hf("DebertaV2Model", "DebertaV2Config", TEXT, **DECODER),
    "gpt_neo": hf("GPTNeoForCausalLM", "GPTNeoConfig", TEXT, hidden_size=32, num_layers=2,
                  num_heads=4, attention_types=[[["global", "local"], 1]], window_size=8,
                  vocab_size=96, max_position_embeddings=64),
    "opt": hf("OPTForCausalLM", "OPTConfig", TEXT, hidden_size=32, num_hidden_layers=2,
              num_attention_heads=4, ffn_dim=64, word_embed_proj_dim=32, vocab_size=96,
              max_position_embeddings=64),
    "bloom": hf("BloomForCausalLM", "BloomConfig", TEXT, hidden_size=32, n_layer=2, n_head=4,
                vocab_size=96),
    "falcon": hf("FalconForCausalLM", "FalconConfig", TEXT, hidden_size=32, num_hidden_layers=2,
                 num_attention_heads=4, vocab_size=96),
    "mistral": hf("MistralForCausalLM", "MistralConfig", TEXT, num_key_value_heads=2, **DECODER),
    "qwen2": hf("Qwen2ForCausalLM", "Qwen2Config", TEXT, num_key_value_heads=2, **DECODER),
    "phi": hf("PhiForCausalLM", "PhiConfig", TEXT, **DECODER),
    "gemma": hf("GemmaForCausalLM", "GemmaConfig", TEXT, num_key_value_heads=2, head_dim=8,
                **DECODER),
    "gpt_bigcode": hf("GPTBigCodeForCausalLM", "GPTBigCodeConfig", TEXT, n_layer=2, n_embd=32,
                      n_head=4, vocab_size=96, n_positions=64),
    "bart": hf("BartModel", "BartConfig", SEQ2SEQ, d_model=32, encoder_layers=2,
               decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
               encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=96,
               max_position_embeddings=64),
    "clip_vision": hf("CLIPVisionModel", "CLIPVisionConfig", IMAGE(32), image_size=32,
                      patch_size=8, **SMALL),
    "deit": hf("DeiTModel", "DeiTConfig", IMAGE(32), image_size=32, patch_size=8, **SMALL),
    "beit": hf("BeitModel", "BeitConfig", IMAGE(32), image_size=32, patch_size=8, **SMALL),
    "swin": hf("SwinModel", "SwinConfig", IMAGE(32), image_size=32, patch_size=4, embed_dim=16,
               depths=[1, 1], num_heads=[2, 4], window_size=4),
    "convnext": hf("ConvNextModel", "ConvNextConfig", IMAGE(32), hidden_sizes=[16, 32],
                   depths=[1, 1], num_stages=2),
    "hf_resnet": hf("ResNetModel", "ResNetConfig", IMAGE(32), embedding_size=16,
                    hidden_sizes=[16, 32], depths=[1, 1]),
    "mobilevit": hf("MobileViTModel", "MobileViTConfig", IMAGE(64), image_size=64),
    "segformer": hf("SegformerModel", "SegformerConfig", IMAGE(32), num_encoder_blocks=2,
                    depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2],
                    patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2]),
    "gpt_neox": hf("GPTNeoXForCausalLM", "GPTNeoXConfig", TEXT, **DECODER),
    "mobilebert": hf("MobileBertModel", "MobileBertConfig", TEXT, embedding_size=16,
                     intra_bottleneck_size=16, true_hidden_size=16, num_feedforward_networks=1,
                     **DECODER),
    "squeezebert": hf("SqueezeBertModel", "SqueezeBertConfig", TEXT, embedding_size=32,
                      q_groups=2, k_groups=2, v_groups=2, post_attention_groups=2,
                      intermediate_groups=2, output_groups=2, **DECODER),
    "dinov2": hf("Dinov2Model", "Dinov2Config", IMAGE(32), image_size=32, patch_size=8, **SMALL),
    "levit": hf("LevitModel", "LevitConfig", IMAGE(64), image_size=64, hidden_sizes=[16, 24, 32],
                num_attention_heads=[1, 2, 2], depths=[1, 1, 1], key_dim=[8, 8, 8],
                patch_size=16, down_ops=[["Subsample", 8, 1, 4, 2, 2],
                                         ["Subsample", 8, 2, 4, 2, 2]]),
    "poolformer": hf("PoolFormerModel", "PoolFormerConfig", IMAGE(32), hidden_sizes=[16, 32],
                     depths=[1, 1], num_encoder_blocks=2, patch_sizes=[7, 3], strides=[4, 2],
                     padding=[2, 1]),
    "whisper": hf("WhisperModel", "WhisperConfig",
                  lambda torch, c: {"input_features": torch.randn(
                      1, c.num_mel_bins, 2 * c.max_source_positions,
                      generator=torch.Generator().manual_seed(0)),
                      "decoder_input_ids": torch.tensor([[1, 2, 3]])},
                  d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                  num_mel_bins=16, max_source_positions=32, max_target_positions=16,
                  vocab_size=96, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                  decoder_start_token_id=1),
    "tv_mobilenet_v3_large": tv("mobilenet_v3_large"),
    "tv_inception_v3": tv("inception_v3", size=96, aux_logits=False, init_weights=True),
    "tv_efficientnet_v2_s": tv("efficientnet_v2_s"),
    "tv_resnext": tv("resnext50_32x4d"),
    "tv_efficientnet_b0": tv("efficientnet_b0"),
    "tv_vgg11": tv("vgg11", size=64),
    "tv_densenet121": tv("densenet121"),
    "tv_squeezenet": tv("squeezenet1_1"),
    "tv_shufflenet": tv("shufflenet_v2_x0_5"),
    "tv_regnet": tv("regnet_y_400mf"),
    "tv_convnext_tiny": tv("convnext_tiny"),
    "tv_swin_t": tv("swin_t", size=64),
    "tv_vit_b_16": tv("vit_b_16", size=224),
    "tv_alexnet": tv("alexnet", size=64),
    "tv_googlenet": tv("googlenet", size=64, init_weights=True, aux_logits=False),
    "tv_mnasnet": tv("mnasnet0_5"),
}

# A second round of families (2026-11-24): more encoders, seq2seq and decoder variants
# (rotary, ALiBi, mixtures of experts, state-space), speech, and more vision and video.
SEQ2SEQ_CFG = dict(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                   vocab_size=96, max_position_embeddings=64, pad_token_id=0,
                   decoder_start_token_id=2)
AUDIO = lambda torch, c: {"input_values": torch.randn(
    2, 1600, generator=torch.Generator().manual_seed(0))}
AUDIO_CFG = dict(SMALL, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                 num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)


def tvm(module, fn, shape, **kw):
    """A torchvision model from a submodule (video, segmentation) and an input shape."""
    def build(torch):
        import importlib
        factory = getattr(importlib.import_module(f"torchvision.models.{module}"), fn)
        gen = torch.Generator().manual_seed(0)
        return factory(weights=None, **kw), (torch.randn(*shape, generator=gen),)
    return build


MODELS.update({
    "xlm_roberta": hf("XLMRobertaModel", "XLMRobertaConfig", TEXT, **DECODER),
    "mpnet": hf("MPNetModel", "MPNetConfig", TEXT, **DECODER),
    "roformer": hf("RoFormerModel", "RoFormerConfig", TEXT, embedding_size=32, **DECODER),
    "convbert": hf("ConvBertModel", "ConvBertConfig", TEXT, embedding_size=32, **DECODER),
    "funnel": hf("FunnelModel", "FunnelConfig", TEXT, d_model=32, n_head=4, d_head=8,
                 d_inner=64, block_sizes=[1, 1], num_decoder_layers=1, vocab_size=96),
    "xlnet": hf("XLNetModel", "XLNetConfig", TEXT, d_model=32, n_layer=2, n_head=4, d_inner=64,
                vocab_size=96),
    "esm": hf("EsmModel", "EsmConfig", TEXT, pad_token_id=1, mask_token_id=2,
              position_embedding_type="rotary", **DECODER),
    "big_bird": hf("BigBirdModel", "BigBirdConfig", TEXT, attention_type="original_full",
                   **DECODER),
    "megatron_bert": hf("MegatronBertModel", "MegatronBertConfig", TEXT, **DECODER),
    "marian": hf("MarianMTModel", "MarianConfig", SEQ2SEQ, **SEQ2SEQ_CFG),
    "mbart": hf("MBartForConditionalGeneration", "MBartConfig", SEQ2SEQ, **SEQ2SEQ_CFG),
    "pegasus": hf("PegasusModel", "PegasusConfig", SEQ2SEQ, **SEQ2SEQ_CFG),
    "m2m100": hf("M2M100Model", "M2M100Config", SEQ2SEQ, **SEQ2SEQ_CFG),
    "gptj": hf("GPTJForCausalLM", "GPTJConfig", TEXT, n_embd=32, n_layer=2, n_head=4,
               rotary_dim=4, vocab_size=96, n_positions=64),
    "codegen": hf("CodeGenForCausalLM", "CodeGenConfig", TEXT, n_embd=32, n_layer=2, n_head=4,
                  rotary_dim=4, vocab_size=96, n_positions=64, n_ctx=64),
    "stablelm": hf("StableLmForCausalLM", "StableLmConfig", TEXT, num_key_value_heads=2,
                   **DECODER),
    "starcoder2": hf("Starcoder2ForCausalLM", "Starcoder2Config", TEXT, num_key_value_heads=2,
                     **DECODER),
    "olmo": hf("OlmoForCausalLM", "OlmoConfig", TEXT, **DECODER),
    "phi3": hf("Phi3ForCausalLM", "Phi3Config", TEXT, num_key_value_heads=2, pad_token_id=0,
               **DECODER),
    "mixtral": hf("MixtralForCausalLM", "MixtralConfig", TEXT, num_key_value_heads=2,
                  num_local_experts=4, num_experts_per_tok=2, **DECODER),
    "qwen2_moe": hf("Qwen2MoeForCausalLM", "Qwen2MoeConfig", TEXT, num_key_value_heads=2,
                    num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                    shared_expert_intermediate_size=32, **DECODER),
    "gemma2": hf("Gemma2ForCausalLM", "Gemma2Config", TEXT, num_key_value_heads=2, head_dim=8,
                 **DECODER),
    "qwen3": hf("Qwen3ForCausalLM", "Qwen3Config", TEXT, num_key_value_heads=2, head_dim=8,
                **DECODER),
    "cohere": hf("CohereForCausalLM", "CohereConfig", TEXT, num_key_value_heads=2, **DECODER),
    "granite": hf("GraniteForCausalLM", "GraniteConfig", TEXT, **DECODER),
    "biogpt": hf("BioGptForCausalLM", "BioGptConfig", TEXT, **DECODER),
    "xglm": hf("XGLMForCausalLM", "XGLMConfig", TEXT, d_model=32, num_layers=2,
               attention_heads=4, ffn_dim=64, vocab_size=96, max_position_embeddings=64),
    "mpt": hf("MptForCausalLM", "MptConfig", TEXT, d_model=32, n_heads=4, n_layers=2,
              vocab_size=96, max_seq_len=64),
    "ctrl": hf("CTRLLMHeadModel", "CTRLConfig", TEXT, n_embd=32, n_layer=2, n_head=4, dff=64,
               vocab_size=96, n_positions=64),
    "mamba": hf("MambaForCausalLM", "MambaConfig", IDS, hidden_size=32, num_hidden_layers=2,
                vocab_size=96, state_size=8),
    "wav2vec2": hf("Wav2Vec2Model", "Wav2Vec2Config", AUDIO, **AUDIO_CFG),
    "hubert": hf("HubertModel", "HubertConfig", AUDIO, **AUDIO_CFG),
    "swinv2": hf("Swinv2Model", "Swinv2Config", IMAGE(32), image_size=32, patch_size=4,
                 embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4),
    "convnextv2": hf("ConvNextV2Model", "ConvNextV2Config", IMAGE(32), hidden_sizes=[16, 32],
                     depths=[1, 1], num_stages=2),
    "mobilevitv2": hf("MobileViTV2Model", "MobileViTV2Config", IMAGE(64), image_size=64,
                      width_multiplier=0.5),
    "pvt_v2": hf("PvtV2Model", "PvtV2Config", IMAGE(64), image_size=64),
    "focalnet": hf("FocalNetModel", "FocalNetConfig", IMAGE(32), image_size=32, patch_size=4,
                   embed_dim=16, depths=[1, 1], focal_levels=[2, 2], focal_windows=[3, 3]),
    "bit": hf("BitModel", "BitConfig", IMAGE(32), embedding_size=16, hidden_sizes=[16, 32],
              depths=[1, 1]),
    "regnet_hf": hf("RegNetModel", "RegNetConfig", IMAGE(32), embedding_size=16,
                    hidden_sizes=[16, 32], depths=[1, 1], groups_width=8),
    "yolos": hf("YolosModel", "YolosConfig", IMAGE(32), image_size=[32, 32], patch_size=8,
                num_detection_tokens=5, **SMALL),
    "siglip_vision": hf("SiglipVisionModel", "SiglipVisionConfig", IMAGE(32), image_size=32,
                        patch_size=8, **SMALL),
    "data2vec_vision": hf("Data2VecVisionModel", "Data2VecVisionConfig", IMAGE(32),
                          image_size=32, patch_size=8, **SMALL),
    "mobilenet_v2_hf": hf("MobileNetV2Model", "MobileNetV2Config", IMAGE(64), image_size=64,
                          depth_multiplier=0.35),
    "tv_swin_v2_t": tv("swin_v2_t", size=64),
    "tv_maxvit_t": tv("maxvit_t", size=224),
    "tv_regnet_x": tv("regnet_x_400mf"),
    "tv_r3d_18": tvm("video", "r3d_18", (1, 3, 4, 32, 32)),
    "tv_r2plus1d_18": tvm("video", "r2plus1d_18", (1, 3, 4, 32, 32)),
    "tv_deeplabv3": tvm("segmentation", "deeplabv3_mobilenet_v3_large", (1, 3, 64, 64),
                        weights_backbone=None),
    "tv_lraspp": tvm("segmentation", "lraspp_mobilenet_v3_large", (1, 3, 64, 64),
                     weights_backbone=None),
})

# A third round: task heads (sequence classification reads the last real token by an
# argmax, segmentation upsamples), CLIP (text and vision), more speech and video.
CLIP_INPUTS = lambda torch, c: dict(text_inputs(torch, c.text_config.vocab_size),
                                    pixel_values=image_inputs(torch, size=32)["pixel_values"])
VIDEO = lambda torch, c: {"pixel_values": torch.randn(
    2, 2, 3, 32, 32, generator=torch.Generator().manual_seed(0))}
MODELS.update({
    "gpt2_cls": hf("GPT2ForSequenceClassification", "GPT2Config", TEXT, n_layer=2, n_embd=32,
                   n_head=4, vocab_size=96, n_positions=64, pad_token_id=0),
    "llama_cls": hf("LlamaForSequenceClassification", "LlamaConfig", TEXT, pad_token_id=0,
                    **DECODER),
    "clip": hf("CLIPModel", "CLIPConfig", CLIP_INPUTS,
               text_config=dict(DECODER, eos_token_id=2),
               vision_config=dict(SMALL, image_size=32, patch_size=8)),
    "segformer_seg": hf("SegformerForSemanticSegmentation", "SegformerConfig", IMAGE(32),
                        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                        hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2],
                        num_attention_heads=[1, 2], mlp_ratios=[2, 2], decoder_hidden_size=32,
                        num_labels=3),
    "mobilevit_seg": hf("MobileViTForSemanticSegmentation", "MobileViTConfig", IMAGE(64),
                        image_size=64, num_labels=3),
    "wavlm": hf("WavLMModel", "WavLMConfig", AUDIO, **AUDIO_CFG),
    "data2vec_audio": hf("Data2VecAudioModel", "Data2VecAudioConfig", AUDIO, **AUDIO_CFG),
    "sew": hf("SEWModel", "SEWConfig", AUDIO, squeeze_factor=2, **AUDIO_CFG),
    "ast": hf("ASTModel", "ASTConfig",
              lambda torch, c: {"input_values": torch.randn(
                  2, c.max_length, c.num_mel_bins, generator=torch.Generator().manual_seed(0))},
              num_mel_bins=16, max_length=32, patch_size=8, frequency_stride=4, time_stride=4,
              **SMALL),
    "timesformer": hf("TimesformerModel", "TimesformerConfig", VIDEO, image_size=32,
                      patch_size=8, num_frames=2, **SMALL),
    "videomae": hf("VideoMAEModel", "VideoMAEConfig", VIDEO, image_size=32, patch_size=8,
                   num_frames=2, tubelet_size=2, **SMALL),
    "deberta": hf("DebertaModel", "DebertaConfig", TEXT, **DECODER),
    "nystromformer": hf("NystromformerModel", "NystromformerConfig", TEXT, num_landmarks=4,
                        segment_means_seq_len=12, **DECODER),
})


# --- export ----------------------------------------------------------------------------

def write_tensor(path, t):
    with open(path, "wb") as f:
        f.write(t.detach().cpu().contiguous().numpy().tobytes())


def export_one(name, out):
    import torch
    import torch.utils._pytree as pytree
    from torch.export.graph_signature import InputKind

    torch.set_num_threads(2)
    torch.manual_seed(0)
    folder = Path(out) / name
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"name": name, "torch": torch.__version__}
    t0 = time.time()
    try:
        model, inputs = MODELS[name](torch)
        model = model.eval()
        args, kwargs = (inputs, {}) if isinstance(inputs, tuple) else ((), inputs)
        with torch.no_grad():
            try:
                exported = torch.export.export(model, args, kwargs)
            except RuntimeError as e:
                # transformers 5 does not register its KV caches with pytree: a user
                # exporting a decoder turns the cache off, as this does.
                if "Cache" not in str(e) or not hasattr(model.config, "use_cache"):
                    raise
                model.config.use_cache = False
                meta["use_cache"] = False
                kwargs = dict(kwargs, use_cache=False)
                exported = torch.export.export(model, args, kwargs)
    except Exception as e:
        meta["export_error"] = f"{type(e).__name__}: {str(e)[:400]}"
        (folder / "meta.json").write_text(json.dumps(meta, indent=1))
        return name, meta["export_error"]
    meta["export_s"] = round(time.time() - t0, 1)
    torch.export.save(exported, str(folder / "model.pt2"))
    try:
        core = exported.run_decompositions()
        torch.export.save(core, str(folder / "model_core.pt2"))
    except Exception as e:
        meta["core_error"] = f"{type(e).__name__}: {str(e)[:400]}"
    names = [s.arg.name for s in exported.graph_signature.input_specs
             if s.kind == InputKind.USER_INPUT]
    flat = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
    meta["inputs"] = []
    for n, x in zip(names, flat):
        write_tensor(folder / f"{n}.bin", x)
        meta["inputs"].append({"name": n, "shape": list(x.shape),
                               "dtype": str(x.dtype).replace("torch.", "")})
    with torch.no_grad():
        got = exported.module()(*args, **kwargs)
        # The reference: the model in float64 (as Kiln's interpreter computes).
        model64 = model.to(torch.float64)
        double = lambda v: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
        a64 = tuple(double(x) for x in args)
        k64 = {k: double(v) for k, v in kwargs.items()}
        try:
            ref = model64(*a64, **k64)
        except Exception:
            ref = got
    leaves = [x for x in pytree.tree_leaves(got) if isinstance(x, torch.Tensor)]
    ref_leaves = [x for x in pytree.tree_leaves(ref) if isinstance(x, torch.Tensor)]
    if len(ref_leaves) != len(leaves):
        ref_leaves = leaves
    meta["outputs"] = []
    for i, (y, r) in enumerate(zip(leaves, ref_leaves)):
        write_tensor(folder / f"expected{i}.bin", r.to(y.dtype) if y.is_floating_point() else y)
        # PyTorch's own float32 result, to judge how well conditioned the model is.
        write_tensor(folder / f"eager{i}.bin", y)
        meta["outputs"].append({"shape": list(y.shape), "dtype": str(y.dtype).replace("torch.", "")})
    meta["ops"] = sorted({str(n.target) for n in exported.graph.nodes if n.op == "call_function"})
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))
    return name, "ok"


# --- check -----------------------------------------------------------------------------

def first_error(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    for l in lines:
        if l.lower().startswith("error"):
            return l[:300]
    return (lines[-1] if lines else "(no output)")[:300]


def rel_err(np, got, want):
    got = got.astype(np.float64)
    want = want.astype(np.float64)
    if want.size == 0:
        return 0.0
    scale = np.abs(want[np.isfinite(want)]).max() if np.isfinite(want).any() else 1.0
    diff = np.abs(got - want)
    diff[(got == want) | (np.isnan(got) & np.isnan(want))] = 0
    err = np.nan_to_num(diff, nan=np.inf).max()
    return float(err / scale) if scale > 0 else float(err)


def check_one(folder, form, host, devices, gpu, cpu_run_mb=float("inf")):
    import numpy as np

    meta = json.loads((folder / "meta.json").read_text())
    archive = folder / ("model.pt2" if form == "exported" else "model_core.pt2")
    row = {"model": folder.name, "form": form}
    if not archive.exists():
        row["import"] = "no archive: " + meta.get("export_error", meta.get("core_error", "?"))[:200]
        return row
    work = folder / f"kiln_{form}"
    for device in devices:
        out = work / device
        p = subprocess.run([host, "compile", str(archive), "--device", device, "-o", str(out)],
                           capture_output=True, text=True, timeout=600)
        row[f"compile_{device}"] = "ok" if p.returncode == 0 else first_error(p.stderr + p.stdout)
    dtypes = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "bool": np.bool_,
              "float16": np.float16, "bfloat16": None, "int32": np.int32}
    expected = []
    for i, o in enumerate(meta["outputs"]):
        dt = dtypes.get(o["dtype"])
        raw = (folder / f"expected{i}.bin").read_bytes()
        expected.append(np.frombuffer(raw, dtype=dt).reshape(o["shape"]) if dt else None)
    # How far PyTorch's own float32 result is from the float64 reference: an
    # ill-conditioned model is judged against that, as bench/gpu/run.py does.
    eager_errs = []
    for i, want in enumerate(expected):
        f = folder / f"eager{i}.bin"
        if want is not None and f.exists() and want.dtype.kind == "f":
            got = np.frombuffer(f.read_bytes(), dtype=want.dtype)
            eager_errs.append(rel_err(np, got.reshape(-1), want.reshape(-1)))
    row["eager_vs_f64"] = max(eager_errs) if eager_errs else 0.0
    if row.get("compile_cpu") == "ok" and archive.stat().st_size > cpu_run_mb * 2**20:
        row["run_cpu"] = "skipped (archive over --cpu-run-mb)"
    elif row.get("compile_cpu") == "ok":
        run_out = work / "cpu_run"
        p = subprocess.run([host, "run", str(archive), "--inputs", str(folder), "--out",
                            str(run_out)], capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            row["run_cpu"] = first_error(p.stderr + p.stdout)
        else:
            errs = []
            for i, want in enumerate(expected):
                f = run_out / f"output{i}.bin"
                if want is None or not f.exists():
                    errs.append(float("nan"))
                    continue
                got = np.frombuffer(f.read_bytes(), dtype=want.dtype)
                errs.append(rel_err(np, got.reshape(-1), want.reshape(-1)) if got.size == want.size
                            else float("inf"))
            row["run_cpu"] = max(errs) if errs else 0.0
            row["outputs"] = len(list(run_out.glob("output*.bin")))
    if gpu and row.get("compile_cuda") == "ok":
        row["run_cuda"] = run_cuda(work / "cuda", folder, meta, expected)
    return row


def run_cuda(case, folder, meta, expected):
    """The generated output_code.py in a child process, against the stored outputs."""
    script = f"""
import importlib.util, json, sys, numpy as np, torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
meta = json.loads(open({str(folder / 'meta.json')!r}).read())
spec = importlib.util.spec_from_file_location("kiln_out", {str(case / 'output_code.py')!r})
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
ins = []
for i in meta["inputs"]:
    raw = open({str(folder)!r} + "/" + i["name"] + ".bin", "rb").read()
    ins.append(torch.frombuffer(bytearray(raw), dtype=getattr(torch, i["dtype"])).reshape(i["shape"]).cuda())
out = m.call(ins)
torch.cuda.synchronize()
errs = []
for k, o in enumerate(meta["outputs"]):
    raw = open({str(folder)!r} + f"/expected{{k}}.bin", "rb").read()
    want = torch.frombuffer(bytearray(raw), dtype=getattr(torch, o["dtype"])).reshape(o["shape"]).double()
    got = out[k].double().cpu() if k < len(out) else None
    if got is None or got.shape != want.shape:
        errs.append(float("inf")); continue
    scale = want.abs().max().item() or 1.0
    d = (got - want).abs(); d[(got == want)] = 0
    errs.append(torch.nan_to_num(d, nan=float("inf")).max().item() / scale)
print("RESULT", max(errs) if errs else 0.0, len(out))
"""
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT"):
            return float(line.split()[1])
    return first_error(p.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("out")
    e.add_argument("--only", action="append")
    e.add_argument("--jobs", type=int, default=4)
    c = sub.add_parser("check")
    c.add_argument("out")
    c.add_argument("--host", required=True)
    c.add_argument("--devices", nargs="+", default=["cpu", "cuda"])
    c.add_argument("--only", action="append")
    c.add_argument("--jobs", type=int, default=4)
    c.add_argument("--json", help="write the rows here")
    c.add_argument("--cpu-run-mb", type=float, default=float("inf"),
                   help="run on cpu only archives up to this size (big convolutions are slow there)")
    a = p.parse_args()
    if a.cmd == "export":
        names = a.only or list(MODELS)
        with cf.ProcessPoolExecutor(a.jobs) as pool:
            for name, status in pool.map(export_one, names, [a.out] * len(names)):
                print(f"{name:24} {status}", flush=True)
        return
    import shutil
    gpu = shutil.which("nvidia-smi") is not None and "cuda" in a.devices
    folders = [f for f in sorted(Path(a.out).iterdir()) if (f / "meta.json").exists()
               and (not a.only or f.name in a.only)]
    jobs = [(f, form) for f in folders for form in ("exported", "core")]
    rows = []
    with cf.ThreadPoolExecutor(a.jobs) as pool:
        futures = {pool.submit(check_one, f, form, a.host, a.devices, gpu, a.cpu_run_mb): (f, form)
                   for f, form in jobs}
        for fut in cf.as_completed(futures):
            f, form = futures[fut]
            try:
                row = fut.result()
            except Exception as ex:
                row = {"model": f.name, "form": form, "import": f"checker: {ex!r}"[:300]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    rows.sort(key=lambda r: (r["model"], r["form"]))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    print("\nsummary")
    cols = [f"compile_{d}" for d in a.devices] + ["run_cpu"] + (["run_cuda"] if gpu else [])
    def passed(r, col):
        v = r.get(col)
        limit = max(1e-4, 2 * r.get("eager_vs_f64", 0.0) + 1e-4)
        return v == "ok" or (isinstance(v, float) and v <= limit)

    for col in cols:
        good = sum(1 for r in rows if passed(r, col))
        print(f"{col:14} {good}/{len(rows)}")
    print("(a run passes within 1e-4 of PyTorch's float64 result, or within twice the error of "
          "PyTorch's own float32 result plus 1e-4)")
    for r in rows:
        bad = {k: v for k, v in r.items()
               if k not in ("model", "form", "outputs", "eager_vs_f64") and not passed(r, k)}
        if bad:
            bad["eager_vs_f64"] = r.get("eager_vs_f64")
        if bad:
            print(f"{r['model']:22} {r['form']:8} {bad}")


if __name__ == "__main__":
    main()
