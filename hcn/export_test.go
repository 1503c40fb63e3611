package hcn

// InFlight is how many calls hold a slot of the limiter now (for tests).
func (l *Limiter) InFlight() int { return len(l.slots) }
