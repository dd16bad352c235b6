import { render } from 'preact';
import { App } from './app.js';
import { keepFocusInPage } from './focus.js';
import './styles.css';

performance.mark('app-start');
keepFocusInPage();
const root = document.getElementById('app');
if (root) render(<App />, root);
