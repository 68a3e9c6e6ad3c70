<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Peregrine\Laravel\ObjectState;
use PHPUnit\Framework\TestCase;

/** What the Laravel sandbox relies on: every property put back, whatever its visibility. */
final class ObjectStateTest extends TestCase
{
    public function testRestorePutsBackPublicProtectedAndParentPrivateProperties(): void
    {
        $object = new ObjectStateChild();
        $shared = new \stdClass();
        $object->public = ['a'];
        $object->setAll('boot', $shared);
        $state = ObjectState::of($object);
        $this->assertSame([], $state->changed());

        $object->public[] = 'b';
        $object->setAll('request', new \stdClass());
        $shared->touched = true; // the same object changed inside: not the state's business
        // 'private' twice: the child's and the parent's own.
        $this->assertEqualsCanonicalizing(['public', 'protected', 'private', 'private', 'object'], $state->changed());

        $state->restore();
        $this->assertSame(['a'], $object->public);
        $this->assertSame(['boot', 'boot', 'boot'], $object->all());
        $this->assertSame($shared, $object->object());
        $this->assertSame([], $state->changed());
    }

    public function testReadonlyAndUninitialisedPropertiesAreLeftAlone(): void
    {
        $object = new ObjectStateReadonly('fixed');
        $state = ObjectState::of($object);
        $object->late = 'set later';
        $state->restore();
        $this->assertSame('fixed', $object->id);
        $this->assertSame('set later', $object->late);
    }
}

class ObjectStateParent
{
    public array $public = [];

    protected string $protected = '';

    private string $private = '';

    private ?object $object = null;

    public function setAll(string $value, object $object): void
    {
        $this->protected = $value;
        $this->private = $value;
        $this->object = $object;
    }

    /** @return list<string> */
    public function parentValues(): array
    {
        return [$this->protected, $this->private];
    }

    public function object(): ?object
    {
        return $this->object;
    }
}

final class ObjectStateChild extends ObjectStateParent
{
    private string $private = '';

    public function setAll(string $value, object $object): void
    {
        parent::setAll($value, $object);
        $this->private = $value;
    }

    /** @return list<string> */
    public function all(): array
    {
        return [...$this->parentValues(), $this->private];
    }
}

final class ObjectStateReadonly
{
    public string $late;

    public function __construct(public readonly string $id)
    {
    }
}
