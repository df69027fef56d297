"""The cluster controller: election through `/controller`, leader and ISR decisions, its channel to
the brokers, and partition reassignment; `context` holds the state and operations the controller
and the reassigner share."""
