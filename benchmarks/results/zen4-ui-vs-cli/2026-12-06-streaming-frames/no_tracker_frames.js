(() => {
  const frame = window.requestAnimationFrame.bind(window);
  const cancel = window.cancelAnimationFrame.bind(window);
  let next = -1;
  window.requestAnimationFrame = (callback) => {
    if (!(new Error().stack || '').includes('/statustracker-')) return frame(callback);
    return next--;
  };
  window.cancelAnimationFrame = (id) => (id < 0 ? undefined : cancel(id));
})();
