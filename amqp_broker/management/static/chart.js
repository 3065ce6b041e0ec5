// A small line chart on a canvas: series of points {key: value}, newest last.
export function drawChart(canvas, history, series, max = 0) {
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, pad = 40, keep = 60;
  ctx.clearRect(0, 0, w, h);
  let top = Math.max(1, max);
  for (const point of history) for (const [key] of series) top = Math.max(top, point[key] || 0);
  ctx.strokeStyle = "#ccc"; ctx.fillStyle = "#666"; ctx.font = "11px sans-serif";
  for (let i = 0; i <= 4; i++) {
    const y = h - pad / 2 - (h - pad) * i / 4;
    ctx.beginPath(); ctx.moveTo(pad, y); ctx.lineTo(w - 5, y); ctx.stroke();
    ctx.fillText((top * i / 4).toFixed(top < 10 ? 1 : 0), 2, y + 4);
  }
  const shown = history.slice(-keep);
  for (const [key, color] of series) {
    ctx.strokeStyle = color; ctx.lineWidth = 2; ctx.beginPath();
    shown.forEach((point, i) => {
      const x = pad + (w - pad - 5) * i / Math.max(1, keep - 1);
      const y = h - pad / 2 - (h - pad) * (point[key] || 0) / top;
      if (i) ctx.lineTo(x, y); else ctx.moveTo(x, y);
    });
    ctx.stroke();
  }
}

export function legend(series, point) {
  return series.map(([key, color, label]) =>
    `<span><i style="background:${color}"></i>${label}: ${(point?.[key] ?? 0).toFixed(1)}/s</span>`)
    .join("");
}
