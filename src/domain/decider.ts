/**
 * The Decider pattern (as in event-driven-io/emmett): a pure `decide` turns a command and the
 * current state into new events, a pure `evolve` folds an event into the state.
 */
export interface Decider<State, Command, Event> {
  decide(command: Command, state: State): Event[];
  evolve(state: State, event: Event): State;
  initialState(): State;
}

export const fold = <State, Command, Event>(decider: Decider<State, Command, Event>, events: readonly Event[]): State =>
  events.reduce(decider.evolve, decider.initialState());
