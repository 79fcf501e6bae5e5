//! The transformer's kernels as host closures: each workgroup does what the
//! GPU sources' workgroup does, and every reduction runs in index order, as
//! the reference does, so the host backend matches it bit for bit.

use graph_capture::host::{Group, View};

/// The workgroup's linear index: the row a per-row kernel works on.
fn row(group: &Group<'_>) -> usize {
    group.id[1] as usize * group.groups[0] as usize + group.id[0] as usize
}

/// A position read from the device, clamped into the context.
fn position(pos: &[u32], b: usize, context: usize) -> Result<usize, String> {
    let p = *pos
        .get(b)
        .ok_or_else(|| format!("no position for sequence {b}"))?;
    Ok((p as usize).min(context.saturating_sub(1)))
}

fn short(what: &str, have: usize, need: usize) -> String {
    format!("{what} holds {have} elements, the launch needs {need}")
}

fn check(what: &str, have: usize, need: usize) -> Result<(), String> {
    if have < need {
        Err(short(what, have, need))
    } else {
        Ok(())
    }
}

pub(crate) fn embed(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let mut params = group.params();
    let (width, vocab, batch) = (
        params.u32()? as usize,
        params.u32()? as usize,
        params.u32()? as usize,
    );
    let [table, tokens, x] = buffers else {
        return Err("embed binds three buffers".into());
    };
    let (table, tokens, x) = (table.f32()?, tokens.u32()?, x.f32_mut()?);
    check("table", table.len(), vocab * width)?;
    check("tokens", tokens.len(), batch)?;
    check("x", x.len(), batch * width)?;
    for i in group.elements_x(batch * width) {
        let (b, c) = (i / width, i % width);
        let token = (tokens[b] as usize).min(vocab.saturating_sub(1));
        x[i] = table[token * width + c];
    }
    Ok(())
}

pub(crate) fn rmsnorm_rows(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let mut params = group.params();
    let (n, rows, eps) = (
        params.u32()? as usize,
        params.u32()? as usize,
        params.f32()?,
    );
    let [x, w, out] = buffers else {
        return Err("rmsnorm_rows binds three buffers".into());
    };
    let (x, w, out) = (x.f32()?, w.f32()?, out.f32_mut()?);
    let r = row(group);
    if r >= rows {
        return Ok(());
    }
    check("x", x.len(), rows * n)?;
    check("w", w.len(), n)?;
    check("out", out.len(), rows * n)?;
    let (x, out) = (&x[r * n..(r + 1) * n], &mut out[r * n..(r + 1) * n]);
    let sum: f32 = x.iter().map(|v| v * v).sum();
    let scale = 1.0 / (sum / n as f32 + eps).sqrt();
    for i in 0..n {
        out[i] = x[i] * scale * w[i];
    }
    Ok(())
}

pub(crate) fn matmul(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let mut params = group.params();
    let (rows, cols, batch) = (
        params.u32()? as usize,
        params.u32()? as usize,
        params.u32()? as usize,
    );
    let [w, x, y] = buffers else {
        return Err("matmul binds three buffers".into());
    };
    let (w, x, y) = (w.f32()?, x.f32()?, y.f32_mut()?);
    check("w", w.len(), rows * cols)?;
    check("x", x.len(), batch * cols)?;
    check("y", y.len(), batch * rows)?;
    for i in group.elements_x(batch * rows) {
        let (b, r) = (i / rows, i % rows);
        let row = &w[r * cols..(r + 1) * cols];
        let v = &x[b * cols..(b + 1) * cols];
        let mut acc = 0.0f32;
        for (a, c) in row.iter().zip(v) {
            acc += a * c;
        }
        y[i] = acc;
    }
    Ok(())
}

pub(crate) fn rope(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let mut params = group.params();
    let (width, head_dim, batch, context) = (
        params.u32()? as usize,
        params.u32()? as usize,
        params.u32()? as usize,
        params.u32()? as usize,
    );
    let [x, pos, table] = buffers else {
        return Err("rope binds three buffers".into());
    };
    let (x, pos, table) = (x.f32_mut()?, pos.u32()?, table.f32()?);
    let half = head_dim / 2;
    if half == 0 {
        return Ok(());
    }
    check("x", x.len(), batch * width)?;
    check("table", table.len(), context * head_dim)?;
    for i in group.elements_x(batch * (width / 2)) {
        let (b, j) = (i / (width / 2), i % (width / 2));
        let (head, k) = (j / half, j % half);
        let p = position(pos, b, context)?;
        let (c, s) = (table[(p * half + k) * 2], table[(p * half + k) * 2 + 1]);
        let at = b * width + head * head_dim + 2 * k;
        let (x0, x1) = (x[at], x[at + 1]);
        x[at] = x0 * c - x1 * s;
        x[at + 1] = x0 * s + x1 * c;
    }
    Ok(())
}

pub(crate) fn kv_append(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let mut params = group.params();
    let (width, context, batch) = (
        params.u32()? as usize,
        params.u32()? as usize,
        params.u32()? as usize,
    );
    let [k, v, pos, k_cache, v_cache] = buffers else {
        return Err("kv_append binds five buffers".into());
    };
    let (k, v, pos) = (k.f32()?, v.f32()?, pos.u32()?);
    let (k_cache, v_cache) = (k_cache.f32_mut()?, v_cache.f32_mut()?);
    check("k", k.len(), batch * width)?;
    check("v", v.len(), batch * width)?;
    check("k_cache", k_cache.len(), batch * context * width)?;
    check("v_cache", v_cache.len(), batch * context * width)?;
    for i in group.elements_x(batch * width) {
        let (b, c) = (i / width, i % width);
        let at = (b * context + position(pos, b, context)?) * width + c;
        k_cache[at] = k[i];
        v_cache[at] = v[i];
    }
    Ok(())
}

pub(crate) fn attn_scores(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let mut params = group.params();
    let (width, head_dim, context, batch, scale) = (
        params.u32()? as usize,
        params.u32()? as usize,
        params.u32()? as usize,
        params.u32()? as usize,
        params.f32()?,
    );
    let [q, k_cache, pos, scores] = buffers else {
        return Err("attn_scores binds four buffers".into());
    };
    let (q, k_cache, pos, scores) = (q.f32()?, k_cache.f32()?, pos.u32()?, scores.f32_mut()?);
    let heads = width / head_dim.max(1);
    check("q", q.len(), batch * width)?;
    check("k_cache", k_cache.len(), batch * context * width)?;
    check("scores", scores.len(), batch * heads * context)?;
    for i in group.elements_x(batch * heads * context) {
        let (bh, t) = (i / context, i % context);
        let (b, h) = (bh / heads, bh % heads);
        if t > position(pos, b, context)? {
            scores[i] = 0.0;
            continue;
        }
        let q = &q[b * width + h * head_dim..][..head_dim];
        let k = &k_cache[(b * context + t) * width + h * head_dim..][..head_dim];
        let mut acc = 0.0f32;
        for (a, c) in q.iter().zip(k) {
            acc += a * c;
        }
        scores[i] = acc * scale;
    }
    Ok(())
}

pub(crate) fn attn_softmax(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let mut params = group.params();
    let (context, heads, batch) = (
        params.u32()? as usize,
        params.u32()? as usize,
        params.u32()? as usize,
    );
    let [scores, pos] = buffers else {
        return Err("attn_softmax binds two buffers".into());
    };
    let (scores, pos) = (scores.f32_mut()?, pos.u32()?);
    let r = row(group);
    if r >= batch * heads {
        return Ok(());
    }
    check("scores", scores.len(), batch * heads * context)?;
    let len = position(pos, r / heads, context)? + 1;
    let row = &mut scores[r * context..(r + 1) * context];
    let max = row[..len].iter().copied().fold(f32::MIN, f32::max);
    let mut sum = 0.0f32;
    for s in &mut row[..len] {
        *s = (*s - max).exp();
        sum += *s;
    }
    for s in &mut row[..len] {
        *s /= sum;
    }
    row[len..].fill(0.0);
    Ok(())
}

pub(crate) fn attn_values(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let mut params = group.params();
    let (width, head_dim, context, batch) = (
        params.u32()? as usize,
        params.u32()? as usize,
        params.u32()? as usize,
        params.u32()? as usize,
    );
    let [probs, v_cache, pos, out] = buffers else {
        return Err("attn_values binds four buffers".into());
    };
    let (probs, v_cache, pos, out) = (probs.f32()?, v_cache.f32()?, pos.u32()?, out.f32_mut()?);
    let heads = width / head_dim.max(1);
    check("probs", probs.len(), batch * heads * context)?;
    check("v_cache", v_cache.len(), batch * context * width)?;
    check("out", out.len(), batch * width)?;
    for i in group.elements_x(batch * width) {
        let (b, c) = (i / width, i % width);
        let h = c / head_dim.max(1);
        let len = position(pos, b, context)? + 1;
        let p = &probs[(b * heads + h) * context..][..len];
        let mut acc = 0.0f32;
        for (t, weight) in p.iter().enumerate() {
            acc += weight * v_cache[(b * context + t) * width + c];
        }
        out[i] = acc;
    }
    Ok(())
}

pub(crate) fn silu_mul(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let n = group.params().u32()? as usize;
    let [gate, up] = buffers else {
        return Err("silu_mul binds two buffers".into());
    };
    let (gate, up) = (gate.f32_mut()?, up.f32()?);
    for i in group.elements_x(n.min(gate.len()).min(up.len())) {
        let g = gate[i];
        gate[i] = g / (1.0 + (-g).exp()) * up[i];
    }
    Ok(())
}

pub(crate) fn argmax(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let mut params = group.params();
    let (vocab, context, batch) = (
        params.u32()? as usize,
        params.u32()? as usize,
        params.u32()? as usize,
    );
    let [logits, pos, tokens, generated] = buffers else {
        return Err("argmax binds four buffers".into());
    };
    let (logits, pos) = (logits.f32()?, pos.u32()?);
    let (tokens, generated) = (tokens.u32_mut()?, generated.u32_mut()?);
    let b = row(group);
    if b >= batch {
        return Ok(());
    }
    check("logits", logits.len(), batch * vocab)?;
    check("tokens", tokens.len(), batch)?;
    check("generated", generated.len(), batch * context)?;
    let token = super::reference::argmax(&logits[b * vocab..(b + 1) * vocab]);
    tokens[b] = token;
    generated[b * context + position(pos, b, context)?] = token;
    Ok(())
}

pub(crate) fn settle(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let mut params = group.params();
    let (end, batch) = (params.u32()?, params.u32()? as usize);
    let [tokens, pos, done, held, flag] = buffers else {
        return Err("settle binds five buffers".into());
    };
    if group.elements_x(1).is_empty() {
        return Ok(());
    }
    let (tokens, pos) = (tokens.u32_mut()?, pos.u32_mut()?);
    let (done, held, flag) = (done.u32_mut()?, held.u32_mut()?, flag.u32_mut()?);
    for what in [
        ("tokens", tokens.len()),
        ("pos", pos.len()),
        ("done", done.len()),
    ] {
        check(what.0, what.1, batch)?;
    }
    check("held", held.len(), batch)?;
    check("flag", flag.len(), 1)?;
    let mut running = 0;
    for b in 0..batch {
        if done[b] != 0 {
            tokens[b] = end;
            pos[b] = held[b];
        } else if tokens[b] == end {
            done[b] = 1;
            held[b] = pos[b];
        }
        running |= u32::from(done[b] == 0);
    }
    flag[0] = running;
    Ok(())
}

pub(crate) fn advance(group: &Group<'_>, buffers: &mut [View<'_>]) -> Result<(), String> {
    let mut params = group.params();
    let (context, batch) = (params.u32()?, params.u32()? as usize);
    let [pos] = buffers else {
        return Err("advance binds one buffer".into());
    };
    let pos = pos.u32_mut()?;
    let last = context.saturating_sub(1);
    for b in group.elements_x(batch.min(pos.len())) {
        pos[b] = (pos[b].min(last) + 1).min(last);
    }
    Ok(())
}
