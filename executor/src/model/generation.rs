//! A model's own sampling defaults (a Hugging Face directory's
//! `generation_config.json`), applied to the fields a request leaves out,
//! as vLLM applies them: the publisher's recommended temperature, top-p,
//! top-k, min-p and repetition penalty instead of OpenAI's neutral ones.
//! A GGUF file carries none, so its defaults are empty.

use serde::{Deserialize, Serialize};

/// Sampling defaults; `None` leaves the API's own default in force.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerationDefaults {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<usize>,
    pub repetition_penalty: Option<f32>,
}

impl GenerationDefaults {
    /// Reads `generation_config.json`: the sampling keys above, each checked
    /// to be a number in its range (an out-of-range value is an error naming
    /// the key, not a silently different model), and the end-of-sequence ids.
    pub fn parse(bytes: &[u8]) -> Result<(Self, Vec<u32>), String> {
        let v: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| format!("generation_config.json: {e}"))?;
        let Some(o) = v.as_object() else {
            return Err("generation_config.json: not a JSON object".into());
        };
        let num = |key: &str, ok: &dyn Fn(f64) -> bool| -> Result<Option<f64>, String> {
            match o.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(v) => match v.as_f64() {
                    Some(x) if x.is_finite() && ok(x) => Ok(Some(x)),
                    _ => Err(format!(
                        "generation_config.json: `{key}` is {v}, out of range"
                    )),
                },
            }
        };
        let temperature = num("temperature", &|x| (0.0..=2.0).contains(&x))?;
        let top_p = num("top_p", &|x| x > 0.0 && x <= 1.0)?;
        let top_k = num("top_k", &|x| x >= 0.0 && x.fract() == 0.0)?;
        let repetition_penalty = num("repetition_penalty", &|x| x > 0.0 && x <= 2.0)?;
        let ids = match o.get("eos_token_id") {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::Array(a)) => a.iter().map(as_id).collect::<Result<_, _>>()?,
            Some(v) => vec![as_id(v)?],
        };
        Ok((
            GenerationDefaults {
                temperature: temperature.map(|x| x as f32),
                top_p: top_p.map(|x| x as f32),
                // top_k 0 means "off" in transformers.
                top_k: top_k.map(|x| x as usize).filter(|&k| k > 0),
                repetition_penalty: repetition_penalty.map(|x| x as f32),
            },
            ids,
        ))
    }

    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

fn as_id(v: &serde_json::Value) -> Result<u32, String> {
    v.as_u64()
        .and_then(|x| u32::try_from(x).ok())
        .ok_or_else(|| format!("generation_config.json: `eos_token_id` holds {v}, not a token id"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sampling_keys_and_eos_lists() {
        let (d, eos) = GenerationDefaults::parse(
            br#"{"do_sample": true, "temperature": 0.6, "top_p": 0.9, "top_k": 0,
                 "eos_token_id": [128001, 128009], "transformers_version": "4.45"}"#,
        )
        .unwrap();
        assert_eq!(d.temperature, Some(0.6));
        assert_eq!(d.top_p, Some(0.9));
        assert_eq!(d.top_k, None);
        assert_eq!(eos, vec![128001, 128009]);
    }

    #[test]
    fn out_of_range_and_malformed_values_are_refused_by_name() {
        for (json, key) in [
            (&br#"{"temperature": -1}"#[..], "temperature"),
            (br#"{"top_p": 0}"#, "top_p"),
            (br#"{"top_k": 1.5}"#, "top_k"),
            (br#"{"eos_token_id": ["x"]}"#, "eos_token_id"),
            (b"[]", "object"),
            (b"{", "generation_config.json"),
        ] {
            let e = GenerationDefaults::parse(json).unwrap_err();
            assert!(e.contains(key), "{e}");
        }
    }
}
