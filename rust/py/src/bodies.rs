//! A window of request bodies as sent (`replay_core::body`), made with the GIL released.

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyBytes, PyString, PyTuple};

use replay_core::body::{rewrite, synthesized, Api, Body, SendSettings};
use replay_core::synth::{sample_units, UnitTable};

/// One row of a window, as Python hands it over.
enum Row {
    /// a stored body's JSON text
    Stored(PyBackedStr),
    /// a token-only row: its synthesized text, the row's model and the synthesis `max_tokens`
    Synthesized(PyBackedStr, Option<PyBackedStr>, Option<i64>),
    /// a token-only row whose text is drawn here (`prompts`): its key, its length in units, the
    /// row's model and the synthesis `max_tokens`
    Drawn(u64, usize, Option<PyBackedStr>, Option<i64>),
    /// left to Python
    Skip,
}

fn row(item: &Bound<'_, PyAny>) -> PyResult<Row> {
    if item.is_none() {
        return Ok(Row::Skip);
    }
    if let Ok(s) = item.cast::<PyString>() {
        return Ok(Row::Stored(s.extract()?));
    }
    let t = item.cast::<PyTuple>()?;
    if t.len() == 4 {
        return Ok(Row::Drawn(
            t.get_item(0)?.extract()?,
            t.get_item(1)?.extract()?,
            t.get_item(2)?.extract()?,
            t.get_item(3)?.extract()?,
        ));
    }
    Ok(Row::Synthesized(
        t.get_item(0)?.extract()?,
        t.get_item(1)?.extract()?,
        t.get_item(2)?.extract()?,
    ))
}

/// The bodies of one window as sent: `(bytes, offsets, left)`, body i at
/// `bytes[offsets[i]:offsets[i + 1]]`, made by `replay_core::body` from `bodies[i]`: a stored
/// body's JSON text, `(text, model, max_tokens)` for a token-only row's synthesized body, or
/// `(key, length, model, max_tokens)` for one whose text is drawn here from `prompts` (`(table,
/// seed, domain)`, as `prompt_texts` draws it), each
/// with the API of `path_index[i]`, `max_tokens[i]` (-1: none), `model` and `ignore_eos` set.
/// `left` lists the rows it did not make (an empty span each): a None, or a stored text that is
/// not what `body_json` writes for it; Python makes those.
#[pyfunction]
#[pyo3(signature = (bodies, path_index, max_tokens, model=None, ignore_eos=false, prompts=None))]
#[allow(clippy::type_complexity)]
pub fn send_bodies<'py>(
    py: Python<'py>,
    bodies: Vec<Bound<'py, PyAny>>,
    path_index: PyReadonlyArray1<'py, u8>,
    max_tokens: PyReadonlyArray1<'py, i64>,
    model: Option<&str>,
    ignore_eos: bool,
    prompts: Option<(Vec<String>, u64, u64)>,
) -> PyResult<(
    Bound<'py, PyBytes>,
    Bound<'py, PyArray1<u64>>,
    Bound<'py, PyArray1<i64>>,
)> {
    let (paths, limits) = (path_index.as_slice()?, max_tokens.as_slice()?);
    if paths.len() != bodies.len() || limits.len() != bodies.len() {
        return Err(crate::errors::config(
            "bodies",
            format!(
                "{} bodies, {} path indices and {} max_tokens (want one of each a body)",
                bodies.len(),
                paths.len(),
                limits.len()
            ),
        ));
    }
    let rows = bodies.iter().map(row).collect::<PyResult<Vec<Row>>>()?;
    let mut apis = Vec::with_capacity(paths.len());
    for &p in paths {
        apis.push(Api::from_index(p).ok_or_else(|| {
            crate::errors::config("path_index", format!("{p} is not an API (0-3)"))
        })?);
    }
    // sized first, then written once into the bytes object handed back (and on to the runner
    // without another copy: `split_bodies`)
    let drawn = rows.iter().any(|r| matches!(r, Row::Drawn(..)));
    let prompts = match (prompts, drawn) {
        (Some((table, seed, domain)), true) => Some((
            crate::prompts::n_words(table.len())?,
            UnitTable::new(&table),
            seed,
            domain,
        )),
        (None, true) => {
            return Err(crate::errors::config(
                "prompts",
                "rows to draw need the prompt table, seed and domain",
            ))
        }
        _ => None,
    };
    let made: Vec<Option<Body<'_>>> = py.detach(|| {
        rows.iter()
            .enumerate()
            .map(|(i, r)| {
                let settings = SendSettings {
                    api: apis[i],
                    model,
                    max_tokens: (limits[i] >= 0).then_some(limits[i]),
                    ignore_eos,
                };
                match r {
                    Row::Stored(s) => rewrite(s.as_bytes(), &settings).ok(),
                    Row::Synthesized(text, row_model, mt) => {
                        Some(synthesized(row_model.as_deref(), *mt, text, &settings))
                    }
                    Row::Drawn(key, n, row_model, mt) => {
                        let (n_words, table, seed, domain) =
                            prompts.as_ref().expect("checked above");
                        let units = sample_units(&[*seed, *key, *domain], &[*n], *n_words);
                        let mut text = String::new();
                        table.render(&units, &mut text);
                        Some(synthesized(row_model.as_deref(), *mt, &text, &settings))
                    }
                    Row::Skip => None,
                }
            })
            .collect()
    });
    let mut offsets: Vec<u64> = Vec::with_capacity(made.len() + 1);
    let mut left: Vec<i64> = Vec::new();
    offsets.push(0);
    for (i, body) in made.iter().enumerate() {
        let len = body.as_ref().map_or(0, |b| b.len());
        if body.is_none() {
            left.push(i as i64);
        }
        offsets.push(offsets[i] + len as u64);
    }
    let total = *offsets.last().expect("one offset at least");
    let data = uninit_bytes(py, total as usize)?;
    // SAFETY: a bytes object's buffer, alive as long as `data`
    let out = Out(unsafe { pyo3::ffi::PyBytes_AsString(data.as_ptr()) }.cast::<u8>());
    py.detach(|| {
        let out = &out;
        // SAFETY: `data` is a bytes object of `total` bytes made here, that nothing else has
        // seen yet; each body is written in its own span of it.
        let buf = unsafe { std::slice::from_raw_parts_mut(out.0, total as usize) };
        for (i, body) in made.iter().enumerate() {
            if let Some(b) = body {
                b.write_into(&mut buf[offsets[i] as usize..offsets[i + 1] as usize]);
            }
        }
    });
    Ok((data, offsets.into_pyarray(py), left.into_pyarray(py)))
}

/// Where the bytes of a new bytes object are written with the GIL released.
struct Out(*mut u8);
// SAFETY: the pointer is used by one thread at a time, while the object is alive and unshared.
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

/// A bytes object of `len` bytes not written yet (not zeroed: every byte is written after).
fn uninit_bytes(py: Python<'_>, len: usize) -> PyResult<Bound<'_, PyBytes>> {
    // SAFETY: PyBytes_FromStringAndSize(NULL, n) makes a new object with room for n bytes.
    unsafe {
        let ptr =
            pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), len as pyo3::ffi::Py_ssize_t);
        Ok(Bound::from_owned_ptr_or_err(py, ptr)?.cast_into_unchecked::<PyBytes>())
    }
}
