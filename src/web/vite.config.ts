import { defineConfig } from 'vite';

/** A directory next to this file, as a file-system path (no Node types needed in this project). */
const here = (relative: string): string => decodeURIComponent(new URL(relative, import.meta.url).pathname);

/** The owners' dashboard: Preact + uPlot, built into dist/web and served by the api role at `/`. */
export default defineConfig({
  root: here('.'),
  base: '/',
  // Vite 8 transforms with oxc: JSX goes through Preact's automatic runtime, no preset needed.
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: here('../../dist/web'),
    emptyOutDir: true,
    assetsDir: 'assets',
    target: 'es2022',
    reportCompressedSize: true,
  },
  // `npx vite --config src/web/vite.config.ts` for development, against `npm start` on :8080.
  server: { proxy: { '/api': 'http://127.0.0.1:8080' } },
});
