//! Synthesized prompts for Python (`replay_core::synth`): the units and texts `replay.prompts`
//! draws with numpy, drawn the same way in Rust with the GIL released.

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use replay_core::synth::{sample_units, UnitTable};

pub(crate) fn n_words(table_len: usize) -> PyResult<u32> {
    match u32::try_from(table_len.saturating_sub(1)) {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(crate::errors::config(
            "table",
            "needs at least one word and the period, under 2^32 units",
        )),
    }
}

/// Unit indices (int32) of texts of `lengths` laid end to end, as
/// `PromptVocab.sample_many(lengths, default_rng(SeedSequence(entropy)))` draws them over
/// `n_words` words (unit `n_words` is the period).
#[pyfunction]
pub fn prompt_units<'py>(
    py: Python<'py>,
    entropy: Vec<u64>,
    lengths: Vec<usize>,
    n_words: u32,
) -> PyResult<Bound<'py, PyArray1<i32>>> {
    if n_words == 0 || n_words > i32::MAX as u32 {
        return Err(crate::errors::config("n_words", "must be in 1..2^31"));
    }
    let units = py.detach(|| sample_units(&entropy, &lengths, n_words));
    Ok(units
        .into_iter()
        .map(|u| u as i32)
        .collect::<Vec<_>>()
        .into_pyarray(py))
}

/// The texts of token-only requests (`replay.synth`): text i is `lengths[i]` units drawn from
/// `SeedSequence([seed, keys[i], domain])` and rendered with `table` (the vocabulary's unit
/// strings, the period last).
#[pyfunction]
pub fn prompt_texts(
    py: Python<'_>,
    table: Vec<String>,
    seed: u64,
    keys: PyReadonlyArray1<'_, u64>,
    lengths: PyReadonlyArray1<'_, i64>,
    domain: u64,
) -> PyResult<Vec<String>> {
    let n_words = n_words(table.len())?;
    let (keys, lengths) = (keys.as_slice()?, lengths.as_slice()?);
    if keys.len() != lengths.len() || lengths.iter().any(|&n| n < 0) {
        return Err(crate::errors::config(
            "lengths",
            "one key and one length per text, lengths >= 0",
        ));
    }
    Ok(py.detach(|| {
        let table = UnitTable::new(&table);
        keys.iter()
            .zip(lengths)
            .map(|(&key, &n)| {
                let units = sample_units(&[seed, key, domain], &[n as usize], n_words);
                let mut text = String::new();
                table.render(&units, &mut text);
                text
            })
            .collect()
    }))
}
