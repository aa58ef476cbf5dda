package reconciler

import "fmt"

// Logging into the host's log stream, where each line is labelled with the guest, key and
// attempt. Each line is one host call; the host escapes it, cuts it to 4 KiB, keeps the levels
// it is configured for, and drops lines beyond the guest's log rate.

// Level is a log level, in the contract's order.
type Level uint8

// The log levels.
const (
	LevelTrace Level = iota
	LevelDebug
	LevelInfo
	LevelWarn
	LevelError
)

// Log logs message at level.
func Log(level Level, message string) { host().log(level, message) }

// LogTracef logs at trace level, formatting as [fmt.Sprintf].
func LogTracef(format string, args ...any) { Log(LevelTrace, fmt.Sprintf(format, args...)) }

// LogDebugf logs at debug level, formatting as [fmt.Sprintf].
func LogDebugf(format string, args ...any) { Log(LevelDebug, fmt.Sprintf(format, args...)) }

// LogInfof logs at info level, formatting as [fmt.Sprintf].
func LogInfof(format string, args ...any) { Log(LevelInfo, fmt.Sprintf(format, args...)) }

// LogWarnf logs at warn level, formatting as [fmt.Sprintf].
func LogWarnf(format string, args ...any) { Log(LevelWarn, fmt.Sprintf(format, args...)) }

// LogErrorf logs at error level, formatting as [fmt.Sprintf].
func LogErrorf(format string, args ...any) { Log(LevelError, fmt.Sprintf(format, args...)) }
