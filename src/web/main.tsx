import { render } from 'preact';
import { App } from './app.js';
import './styles.css';

performance.mark('app-start');
const root = document.getElementById('app');
if (root) render(<App />, root);
