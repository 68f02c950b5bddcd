//! Import of a Hugging Face `config.json` into the model file form, which then goes
//! through the same validation as a model TOML.
//!
//! Keys read: `hidden_size`, `intermediate_size`, `num_attention_heads`,
//! `num_key_value_heads` (default: `num_attention_heads`, i.e. no GQA),
//! `num_hidden_layers`, `vocab_size`, `hidden_act`, `tie_word_embeddings` (default
//! false). Whether the MLP is gated (gate and up projections) is not in `hidden_act`; it
//! is the architecture's: the families in [`GATED`] (by `model_type`, or an
//! `architectures` entry starting with the family's class prefix) are gated, so `silu`
//! means SwiGLU and `gelu*` GeGLU there; anything else is a plain MLP.

use super::ConfigError;
use super::files::{ModelFile, MoeFile};
use serde_json::Value;

/// `model_type`s whose MLP is gated, with their `architectures` class prefixes.
pub const GATED: &[(&str, &str)] = &[
    ("llama", "Llama"),
    ("mistral", "Mistral"),
    ("mixtral", "Mixtral"),
    ("qwen2", "Qwen2"),
    ("qwen3", "Qwen3"),
    ("gemma", "Gemma"),
    ("gemma2", "Gemma2"),
    ("phi3", "Phi3"),
    ("olmo2", "Olmo2"),
    ("deepseek_v2", "DeepseekV2"),
    ("deepseek_v3", "DeepseekV3"),
    ("qwen2_moe", "Qwen2Moe"),
    ("qwen3_moe", "Qwen3Moe"),
    ("internlm2", "InternLM2"),
];

fn gated(v: &Value) -> bool {
    let mt = v.get("model_type").and_then(Value::as_str).unwrap_or("");
    let archs: Vec<&str> = v
        .get("architectures")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    GATED
        .iter()
        .any(|(t, p)| mt == *t || archs.iter().any(|a| a.starts_with(p)))
}

/// `hidden_act` → the project's activation name (gated or not).
fn activation(file: &str, act: &str, gated: bool) -> Result<&'static str, ConfigError> {
    let base = match act {
        "silu" | "swish" => "silu",
        "gelu" | "gelu_new" | "gelu_fast" | "gelu_pytorch_tanh" | "gelu_python" => "gelu",
        "relu" => "relu",
        other => {
            return Err(ConfigError::invalid(
                file,
                "hidden_act",
                other,
                "unknown activation (known: silu, swish, gelu, gelu_new, gelu_fast, gelu_pytorch_tanh, relu)",
            ));
        }
    };
    Ok(match (base, gated) {
        ("silu", true) => "swiglu",
        ("gelu", true) => "geglu",
        ("relu", true) => {
            return Err(ConfigError::invalid(
                file,
                "hidden_act",
                act,
                "a gated ReLU MLP is not modelled (gated: silu → swiglu, gelu → geglu)",
            ));
        }
        (b, _) => b,
    })
}

fn int(file: &str, v: &Value, key: &str) -> Result<Option<i64>, ConfigError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_i64()
            .map(Some)
            .ok_or_else(|| ConfigError::invalid(file, key, x, "must be an integer")),
    }
}

fn required(file: &str, v: &Value, key: &str) -> Result<i64, ConfigError> {
    int(file, v, key)?.ok_or_else(|| {
        ConfigError::invalid(
            file,
            key,
            "(missing)",
            "a Hugging Face config.json must give it",
        )
    })
}

/// The model file form of a `config.json`; `name` is the file's stem.
pub fn model_file_from_hf(file: &str, name: &str, text: &str) -> Result<ModelFile, ConfigError> {
    let v: Value = serde_json::from_str(text).map_err(|e| ConfigError::Parse {
        file: file.to_string(),
        message: format!("not JSON: {e}"),
    })?;
    if !v.is_object() {
        return Err(ConfigError::Parse {
            file: file.to_string(),
            message: "a config.json holds one JSON object".into(),
        });
    }
    let moe = moe(file, &v)?;
    let heads = required(file, &v, "num_attention_heads")?;
    let hidden = required(file, &v, "hidden_size")?;
    // Attention widths are heads × hidden/heads; a model whose heads are wider or
    // narrower (Gemma: head_dim 256 over hidden 3072 / 16 heads) is not modelled.
    if let Some(hd) = int(file, &v, "head_dim")?
        && heads > 0
        && hd * heads != hidden
    {
        return Err(ConfigError::invalid(
            file,
            "head_dim",
            hd,
            format!(
                "heads × head_dim = {heads} × {hd} differs from hidden_size {hidden}; attention wider or narrower than the hidden size is not modelled"
            ),
        ));
    }
    let act = match v.get("hidden_act") {
        Some(Value::String(s)) => s.as_str(),
        Some(x) => {
            return Err(ConfigError::invalid(
                file,
                "hidden_act",
                x,
                "must be a string",
            ));
        }
        None => {
            return Err(ConfigError::invalid(
                file,
                "hidden_act",
                "(missing)",
                "a Hugging Face config.json must give it",
            ));
        }
    };
    let tie = match v.get("tie_word_embeddings") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(x) => {
            return Err(ConfigError::invalid(
                file,
                "tie_word_embeddings",
                x,
                "must be true or false",
            ));
        }
    };
    Ok(ModelFile {
        version: super::files::VERSION,
        name: name.to_string(),
        description: format!(
            "imported from {file} ({})",
            v.get("model_type")
                .and_then(Value::as_str)
                .unwrap_or("unknown model_type")
        ),
        hidden,
        ffn: required(file, &v, "intermediate_size")?,
        heads,
        kv_heads: Some(int(file, &v, "num_key_value_heads")?.unwrap_or(heads)),
        layers: required(file, &v, "num_hidden_layers")?,
        vocab: required(file, &v, "vocab_size")?,
        activation: activation(file, act, gated(&v))?.to_string(),
        tie_embeddings: tie,
        moe,
    })
}

/// The mixture of experts of a config.json, if it has one: the routed experts from
/// `num_local_experts` (Mixtral), `n_routed_experts` (DeepSeek V2/V3) or `num_experts`
/// (Qwen MoE); `num_experts_per_tok`; each expert's width from `moe_intermediate_size`
/// (DeepSeek, Qwen) or, for Mixtral, `intermediate_size`; shared experts from
/// `n_shared_experts` × `moe_intermediate_size` (DeepSeek) or
/// `shared_expert_intermediate_size` (Qwen2-MoE); dense leading layers from
/// `first_k_dense_replace` (DeepSeek). One expert or none: a dense model.
fn moe(file: &str, v: &Value) -> Result<Option<MoeFile>, ConfigError> {
    let mut found = None;
    for key in ["num_local_experts", "n_routed_experts", "num_experts"] {
        if let Some(n) = int(file, v, key)?
            && n > 1
        {
            found = Some((key, n));
            break;
        }
    }
    let Some((key, experts)) = found else {
        return Ok(None);
    };
    let top_k = int(file, v, "num_experts_per_tok")?.ok_or_else(|| {
        ConfigError::invalid(
            file,
            "num_experts_per_tok",
            "(missing)",
            format!(
                "a mixture of experts ({key} = {experts}) must say how many experts a token goes to"
            ),
        )
    })?;
    let expert_ffn = match int(file, v, "moe_intermediate_size")? {
        Some(w) => w,
        None if key == "num_local_experts" => required(file, v, "intermediate_size")?,
        None => {
            return Err(ConfigError::invalid(
                file,
                "moe_intermediate_size",
                "(missing)",
                format!("a mixture of experts ({key} = {experts}) must give each expert's width"),
            ));
        }
    };
    let shared_ffn = match (
        int(file, v, "n_shared_experts")?,
        int(file, v, "shared_expert_intermediate_size")?,
    ) {
        (Some(n), _) => n.saturating_mul(expert_ffn),
        (None, Some(w)) => w,
        (None, None) => 0,
    };
    Ok(Some(MoeFile {
        experts,
        top_k,
        expert_ffn,
        shared_ffn,
        dense_layers: int(file, v, "first_k_dense_replace")?.unwrap_or(0),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA: &str = r#"{"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
        "vocab_size": 128256, "hidden_act": "silu", "head_dim": 128}"#;

    #[test]
    fn mixtures_of_experts_import_their_fields_and_odd_head_widths_are_refused() {
        assert!(
            model_file_from_hf("c.json", "c", LLAMA)
                .unwrap()
                .moe
                .is_none()
        );
        // Mixtral: each expert as wide as intermediate_size.
        let mixtral = LLAMA.replace(
            "\"head_dim\": 128",
            "\"num_local_experts\": 8, \"num_experts_per_tok\": 2",
        );
        let m = model_file_from_hf("c.json", "c", &mixtral)
            .unwrap()
            .moe
            .unwrap();
        assert_eq!(
            (m.experts, m.top_k, m.expert_ffn, m.shared_ffn),
            (8, 2, 14336, 0)
        );
        // DeepSeek: moe_intermediate_size, shared experts, dense leading layers.
        let ds = LLAMA.replace(
            "\"head_dim\": 128",
            "\"n_routed_experts\": 256, \"num_experts_per_tok\": 8, \"moe_intermediate_size\": 2048, \"n_shared_experts\": 1, \"first_k_dense_replace\": 3",
        );
        let m = model_file_from_hf("c.json", "c", &ds).unwrap().moe.unwrap();
        assert_eq!(
            (
                m.experts,
                m.top_k,
                m.expert_ffn,
                m.shared_ffn,
                m.dense_layers
            ),
            (256, 8, 2048, 2048, 3)
        );
        // Qwen2-MoE: a shared expert's width of its own.
        let qwen = LLAMA.replace(
            "\"head_dim\": 128",
            "\"num_experts\": 60, \"num_experts_per_tok\": 4, \"moe_intermediate_size\": 1408, \"shared_expert_intermediate_size\": 5632",
        );
        let m = model_file_from_hf("c.json", "c", &qwen)
            .unwrap()
            .moe
            .unwrap();
        assert_eq!((m.experts, m.expert_ffn, m.shared_ffn), (60, 1408, 5632));
        // Experts without a top-k, or routed experts without a width: refused by name.
        let no_k = LLAMA.replace("\"head_dim\": 128", "\"num_local_experts\": 8");
        let e = model_file_from_hf("c.json", "c", &no_k)
            .unwrap_err()
            .to_string();
        assert!(e.contains("num_experts_per_tok"), "{e}");
        let no_w = LLAMA.replace(
            "\"head_dim\": 128",
            "\"n_routed_experts\": 256, \"num_experts_per_tok\": 8",
        );
        let e = model_file_from_hf("c.json", "c", &no_w)
            .unwrap_err()
            .to_string();
        assert!(e.contains("moe_intermediate_size"), "{e}");
        let one = LLAMA.replace("\"head_dim\": 128", "\"num_experts\": 1");
        assert!(
            model_file_from_hf("c.json", "c", &one)
                .unwrap()
                .moe
                .is_none()
        );
        let gemma = LLAMA.replace("\"head_dim\": 128", "\"head_dim\": 256");
        let e = model_file_from_hf("c.json", "c", &gemma)
            .unwrap_err()
            .to_string();
        assert!(e.contains("head_dim") && e.contains("32 × 256"), "{e}");
    }
    use crate::config::model_from_file;

    fn load(name: &str) -> crate::scenario::Model {
        let p = format!("{}/models/hf/{name}.json", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&p).unwrap();
        model_from_file(&p, model_file_from_hf(&p, name, &text).unwrap()).unwrap()
    }

    #[test]
    fn the_samples_import_with_their_published_shapes() {
        use crate::scenario::Activation::SwiGlu;
        for (name, h, ffn, heads, kv, layers, vocab) in [
            ("llama-3-8b", 4096, 14336, 32, 8, 32, 128256),
            ("llama-3-70b", 8192, 28672, 64, 8, 80, 128256),
            ("mistral-7b", 4096, 14336, 32, 8, 32, 32000),
            ("qwen2.5-7b", 3584, 18944, 28, 4, 28, 152064),
            ("llama-2-7b", 4096, 11008, 32, 32, 32, 32000),
            ("yi-34b", 7168, 20480, 56, 8, 60, 64000),
        ] {
            let m = load(name);
            assert_eq!(
                (m.hidden, m.ffn, m.heads, m.kv_heads, m.layers, m.vocab),
                (h, ffn, heads, kv, layers, vocab),
                "{name}"
            );
            assert_eq!(m.activation, SwiGlu, "{name}");
            assert!(!m.tied_embeddings, "{name}");
        }
    }

    #[test]
    fn the_imported_llama_equals_the_preset() {
        let preset = crate::config::load_model("llama-3-8b", None).unwrap();
        let mut m = load("llama-3-8b");
        m.name = preset.name.clone();
        assert_eq!(m, preset);
    }

    #[test]
    fn plain_and_gated_mlps_and_defaults() {
        let gpt2 = r#"{"model_type": "gpt_neox", "hidden_size": 2048, "intermediate_size": 8192,
            "num_attention_heads": 16, "num_hidden_layers": 24, "vocab_size": 50304,
            "hidden_act": "gelu", "tie_word_embeddings": true}"#;
        let f = model_file_from_hf("c.json", "c", gpt2).unwrap();
        assert_eq!(
            (f.activation.as_str(), f.kv_heads, f.tie_embeddings),
            ("gelu", Some(16), true)
        );
        let gemma = r#"{"architectures": ["GemmaForCausalLM"], "hidden_size": 2048,
            "intermediate_size": 16384, "num_attention_heads": 8, "num_key_value_heads": 1,
            "num_hidden_layers": 18, "vocab_size": 256000, "hidden_act": "gelu_pytorch_tanh"}"#;
        assert_eq!(
            model_file_from_hf("g.json", "g", gemma).unwrap().activation,
            "geglu"
        );
    }

    #[test]
    fn missing_and_mistyped_fields_are_named() {
        let full = std::fs::read_to_string(format!(
            "{}/models/hf/mistral-7b.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        for key in [
            "hidden_size",
            "intermediate_size",
            "num_attention_heads",
            "num_hidden_layers",
            "vocab_size",
            "hidden_act",
        ] {
            let mut v: Value = serde_json::from_str(&full).unwrap();
            v.as_object_mut().unwrap().remove(key);
            let e = model_file_from_hf("m.json", "m", &v.to_string())
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("m.json") && e.contains(key) && e.contains("(missing)"),
                "{e}"
            );
        }
        let e = model_file_from_hf("m.json", "m", &full.replace("32000", "\"big\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("vocab_size") && e.contains("integer"), "{e}");
        let e = model_file_from_hf("m.json", "m", &full.replace("silu", "tanh"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("hidden_act") && e.contains("tanh"), "{e}");
        assert!(model_file_from_hf("m.json", "m", "[1, 2]").is_err());
        assert!(model_file_from_hf("m.json", "m", "{").is_err());
    }
}
