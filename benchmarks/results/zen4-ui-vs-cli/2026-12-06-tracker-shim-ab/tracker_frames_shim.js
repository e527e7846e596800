(() => {
  const raf = window.requestAnimationFrame.bind(window);
  const caf = window.cancelAnimationFrame.bind(window);
  window.requestAnimationFrame = (callback) => {
    if (!(new Error().stack || '').includes('statustracker')) return raf(callback);
    return -setTimeout(() => callback(performance.now()), 100);
  };
  window.cancelAnimationFrame = (id) => (id < 0 ? clearTimeout(-id) : caf(id));
})();
