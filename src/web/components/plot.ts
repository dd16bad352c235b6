// Loaded on demand: uPlot and its stylesheet stay out of the initial bundle.
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

export { uPlot };
