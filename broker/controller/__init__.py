"""The cluster controller: election through `/controller`, leader and ISR decisions, its channel to
the brokers, and partition reassignment."""
