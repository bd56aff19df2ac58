package repository

// migrateGate bounds the tests migrating at once (testHookMigrate).
var migrateGate = make(chan struct{}, 4)

func init() {
	testHookMigrate = func() func() {
		migrateGate <- struct{}{}
		return func() { <-migrateGate }
	}
}
